// Command crds renders the CRDs of operatorbridge/crds into deploy/.
package main
