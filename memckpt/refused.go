package memckpt

import (
	"net"
	"time"
)

// refusedAddresses bounds the addresses whose refusals are counted apart:
// the refusals of any further address are counted together, in one line,
// so that a flood from many addresses grows neither the memory nor the log
// without limit.
const refusedAddresses = 128

// refusals decides when refused peers are said in the log: an address's
// first refusal at once, then at most one line per address and interval,
// carrying the count of its refusals since its last line and the last
// reason. An address with nothing to say for an interval is forgotten, and
// its next refusal is said at once again. It takes the time as an
// argument and does no I/O: the service logs the lines it returns.
type refusals struct {
	interval time.Duration
	max      int
	hosts    map[string]*refused
	// overflow counts the refusals of addresses beyond the max tracked.
	overflow refused
}

// refused is what is not yet said about one address (or the overflow).
type refused struct {
	count int // refusals since the last line
	last  error
	host  string    // the overflow's last address
	said  time.Time // when its last line was said
}

// refusalLine is one line to log: count refusals of host (of several
// addresses, the last of them host, if overflow), the last for err.
type refusalLine struct {
	host     string
	count    int
	err      error
	overflow bool
}

func newRefusals(interval time.Duration, addresses int) *refusals {
	return &refusals{interval: interval, max: addresses, hosts: map[string]*refused{}}
}

// note counts a refusal of host at now for err; it returns the line to
// say now, if one is due.
func (r *refusals) note(now time.Time, host string, err error) (refusalLine, bool) {
	e, ok := r.hosts[host]
	switch {
	case ok:
	case len(r.hosts) < r.max:
		e = &refused{}
		r.hosts[host] = e
	default:
		r.overflow.host = host
		return r.count(now, &r.overflow, "", err)
	}
	return r.count(now, e, host, err)
}

func (r *refusals) count(now time.Time, e *refused, host string, err error) (refusalLine, bool) {
	e.count++
	e.last = err
	if !e.said.IsZero() && now.Sub(e.said) < r.interval {
		return refusalLine{}, false
	}
	return r.say(now, e, host), true
}

func (r *refusals) say(now time.Time, e *refused, host string) refusalLine {
	l := refusalLine{host: host, count: e.count, err: e.last}
	if e == &r.overflow {
		l.host, l.overflow = e.host, true
	}
	e.count, e.said = 0, now
	return l
}

// due returns the lines due at now: the counts of the addresses whose
// last line is an interval old. It forgets the addresses that have had
// nothing to say for an interval.
func (r *refusals) due(now time.Time) []refusalLine {
	var out []refusalLine
	for host, e := range r.hosts {
		if now.Sub(e.said) < r.interval {
			continue
		}
		if e.count == 0 {
			delete(r.hosts, host)
			continue
		}
		out = append(out, r.say(now, e, host))
	}
	if r.overflow.count > 0 && now.Sub(r.overflow.said) >= r.interval {
		out = append(out, r.say(now, &r.overflow, ""))
	}
	return out
}

// rest returns a line for every count not yet said, whenever the last
// line was: the service stops.
func (r *refusals) rest(now time.Time) []refusalLine {
	var out []refusalLine
	for host, e := range r.hosts {
		if e.count > 0 {
			out = append(out, r.say(now, e, host))
		}
	}
	if r.overflow.count > 0 {
		out = append(out, r.say(now, &r.overflow, ""))
	}
	return out
}

// hostOf is the address a peer connects from, without its port: each of
// its connections has another.
func hostOf(a net.Addr) string {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.IP.String()
	}
	if h, _, err := net.SplitHostPort(a.String()); err == nil {
		return h
	}
	return a.String()
}

// refused counts a refused peer connection, and says it if its address
// is due a line.
func (s *Service) refused(host string, err error) {
	if s.ctx.Err() != nil {
		return // Close cut it
	}
	s.refusedMu.Lock()
	l, ok := s.refusals.note(time.Now(), host, err)
	s.refusedMu.Unlock()
	if ok {
		s.sayRefused(l)
	}
}

// refusedLoop says the counts of refused peers as they fall due, and
// what is left of them when the service stops.
func (s *Service) refusedLoop() {
	t := time.NewTicker(max(s.cfg.RefusedLogInterval/4, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case now := <-t.C:
			s.refusedMu.Lock()
			lines := s.refusals.due(now)
			s.refusedMu.Unlock()
			for _, l := range lines {
				s.sayRefused(l)
			}
		}
	}
}

func (s *Service) sayRefused(l refusalLine) {
	if l.overflow {
		s.logger.Warn("checkpoint peers refused, of addresses beyond those counted apart", "addresses", refusedAddresses,
			"refusals", l.count, "interval", s.cfg.RefusedLogInterval, "last_peer", l.host, "error", l.err)
		return
	}
	s.logger.Warn("checkpoint peer refused", "peer", l.host, "refusals", l.count, "interval", s.cfg.RefusedLogInterval,
		"error", l.err)
}
