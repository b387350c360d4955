package policysim

import (
	"math"
	"math/rand/v2"
	"strconv"
	"time"
)

// Job is one job of a trace.
type Job struct {
	ID      string
	Arrival time.Duration
	// Min and Max bound its workers; a job without autoscaling asks for
	// Max.
	Min, Max int
	// Work is what the job must do, in worker-seconds at perfect scaling.
	Work float64
	// Serial is the serial fraction of its speedup curve (Amdahl's law):
	// n workers go n / (1 + Serial·(n-1)) times as fast as one.
	Serial float64
	// WorkerMilliCPU is one worker's CPU request.
	WorkerMilliCPU int64
}

// Speedup is how many times faster than one worker n workers go.
func (j Job) Speedup(n int) float64 {
	if n <= 0 {
		return 0
	}
	return float64(n) / (1 + j.Serial*float64(n-1))
}

// TraceConfig shapes a synthetic trace.
type TraceConfig struct {
	Jobs int
	// MeanInterarrival is the mean time between arrivals (exponential).
	MeanInterarrival time.Duration
	// MedianWork is the median of the jobs' work (log-normal, σ 1).
	MedianWork     float64
	WorkerMilliCPU int64
	Seed           uint64
}

// Synthetic draws a trace: arrivals of a Poisson process, minimums of 1,
// 2 or 4 workers, maximums of 8 to 60, work log-normal around the median,
// serial fractions up to 5 %.
func Synthetic(cfg TraceConfig) []Job {
	r := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
	mins := []int{1, 2, 2, 4}
	maxes := []int{8, 16, 32, 60}
	var at time.Duration
	jobs := make([]Job, cfg.Jobs)
	for i := range jobs {
		if i > 0 {
			at += time.Duration(r.ExpFloat64() * float64(cfg.MeanInterarrival))
		}
		jobs[i] = Job{
			ID: "job-" + strconv.Itoa(i), Arrival: at.Round(time.Second),
			Min: mins[r.IntN(len(mins))], Max: maxes[r.IntN(len(maxes))],
			Work:           cfg.MedianWork * math.Exp(r.NormFloat64()),
			Serial:         r.Float64() * 0.05,
			WorkerMilliCPU: cfg.WorkerMilliCPU,
		}
	}
	return jobs
}
