package autoscale

import "fmt"

// Resources is an amount of what the policy places: CPU in millicores,
// memory in bytes, GPUs (nvidia.com/gpu) whole.
type Resources struct {
	MilliCPU int64
	Memory   int64
	GPU      int64
}

// Add returns r + o.
func (r Resources) Add(o Resources) Resources {
	return Resources{r.MilliCPU + o.MilliCPU, r.Memory + o.Memory, r.GPU + o.GPU}
}

// Sub returns r - o.
func (r Resources) Sub(o Resources) Resources {
	return Resources{r.MilliCPU - o.MilliCPU, r.Memory - o.Memory, r.GPU - o.GPU}
}

// Fits reports whether o fits within r in every resource.
func (r Resources) Fits(o Resources) bool {
	return o.MilliCPU <= r.MilliCPU && o.Memory <= r.Memory && o.GPU <= r.GPU
}

// IsZero reports whether r asks for nothing.
func (r Resources) IsZero() bool { return r == Resources{} }

func (r Resources) String() string {
	s := fmt.Sprintf("cpu %dm, memory %dMi", r.MilliCPU, r.Memory>>20)
	if r.GPU > 0 {
		s += fmt.Sprintf(", gpu %d", r.GPU)
	}
	return s
}
