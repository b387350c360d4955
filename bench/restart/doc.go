// Command restart measures how fast a job on `coordinator run` recovers: the
// time from killing one trainer to every trainer of the next generation
// running, and from `scale` to every trainer running at the new size, with
// a Python trainer that does nothing but record when it started. With
// -torchrun it measures torchrun's recovery from a killed trainer on the same
// machine, for comparison; with -before, another coordinator binary (the
// code before a change) in the same run. Every figure is also given as a
// multiple of the floor: starting the same trainers directly.
//
//	go run ./bench/restart -coordinator bin/coordinator -nodes 4,16 -runs 7 -torchrun
package main
