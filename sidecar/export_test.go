package sidecar

// NamesForTest is names, for the tests of package sidecar_test.
var NamesForTest = names
