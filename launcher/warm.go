package launcher

import (
	"context"
	"errors"
	"fmt"

	"github.com/elastictraining/coordinator/guard"
)

// warmLocked tells guard g, once for each number of processes, to keep a
// warm interpreter for each of them.
func (l *Launcher) warmLocked(g *guardProc, path string, nproc int) error {
	if err := l.spareLocked(g, path, nproc); err != nil {
		return err
	}
	if len(l.cfg.Preload) == 0 || g.warmSlots == nproc {
		return nil
	}
	cmd := guard.Command{Op: guard.OpWarm}
	for local := range nproc {
		cmd.Warm = append(cmd.Warm, guard.Warm{
			Slot: local, Path: path, Argv: l.cfg.Command, Dir: l.cfg.Dir, Env: l.cfg.Env,
			Prefix: fmt.Sprintf("[warm %d] ", local), Preload: l.cfg.Preload,
		})
	}
	if _, err := g.send(cmd, nil); err != nil {
		return err
	}
	g.warmSlots = nproc
	return nil
}

// spareLocked tells guard g, once for each number of processes, to keep a
// started spare for each of them (Config.InPlace).
func (l *Launcher) spareLocked(g *guardProc, path string, nproc int) error {
	if !l.cfg.InPlace || g.spareSlots == nproc {
		return nil
	}
	cmd := guard.Command{Op: guard.OpSpare}
	for local := range nproc {
		cmd.Spares = append(cmd.Spares, guard.Proc{Rank: local, Path: path, Argv: l.cfg.Command, Dir: l.cfg.Dir, Env: l.cfg.Env})
	}
	if _, err := g.send(cmd, nil); err != nil {
		return err
	}
	g.spareSlots = nproc
	return nil
}

// InPlace reports whether the command trains in place (Config.InPlace).
func (l *Launcher) InPlace() bool { return l.cfg.InPlace }

// Prewarm has the guard start a warm interpreter for each of nproc
// processes now, and waits until each has imported its preloads or failed
// to, or until ctx ends. It returns how many are ready. A sidecar calls it
// before it registers its node, so that the node's first generation starts
// warm; without preloads it does nothing.
func (l *Launcher) Prewarm(ctx context.Context, nproc int) (int, error) {
	if len(l.cfg.Preload) == 0 && l.cfg.InPlace && nproc >= 1 {
		// Started spares begin now; nothing waits for them.
		path, err := LookPath(l.cfg.Command[0])
		if err != nil {
			return 0, err
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		g, err := l.guardLocked()
		if err == nil {
			err = l.spareLocked(g, path, nproc)
		}
		return 0, err
	}
	if len(l.cfg.Preload) == 0 || nproc < 1 {
		return 0, nil
	}
	path, err := LookPath(l.cfg.Command[0])
	if err != nil {
		return 0, err
	}
	l.mu.Lock()
	g, err := l.guardLocked()
	if err == nil {
		err = l.warmLocked(g, path, nproc)
	}
	l.mu.Unlock()
	if err != nil {
		return 0, err
	}
	for {
		l.mu.Lock()
		ready, settled := 0, 0
		for slot := range nproc {
			if ok, done := g.warmSettled[slot]; done {
				settled++
				if ok {
					ready++
				}
			}
		}
		changed := l.warmChanged
		l.mu.Unlock()
		if settled == nproc {
			return ready, nil
		}
		select {
		case <-changed:
		case <-g.dead:
			return ready, errors.New("launcher: the process guard exited")
		case <-ctx.Done():
			return ready, ctx.Err()
		}
	}
}

// onWarm records what guard g reports of a warm interpreter.
func (l *Launcher) onWarm(g *guardProc, rep guard.Report) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if g.warmSettled == nil {
		g.warmSettled = map[int]bool{}
	}
	switch rep.Event {
	case guard.EventWarm:
		l.logger.Debug("warm interpreter started", "slot", rep.Rank, "pid", rep.Pid)
		delete(g.warmSettled, rep.Rank)
	case guard.EventWarmReady:
		l.logger.Debug("warm interpreter ready", "slot", rep.Rank, "pid", rep.Pid)
		g.warmSettled[rep.Rank] = true
	case guard.EventWarmLost:
		g.warmSettled[rep.Rank] = false
	}
	l.warmNoticeLocked()
}

// Cold reports whether the node's next start would start a process cold
// that could start warm: with preloads, not every slot has a warm
// interpreter that imported them. Its guard died, or was fenced, which
// kills them; they are importing; they were used by the last start and
// their replacements are not ready yet; or a preload failed. Without
// preloads nothing ever starts warm, and it is false. changed is closed
// when the answer may have changed.
func (l *Launcher) Cold() (cold bool, changed <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.coldLocked(), l.warmChanged
}

func (l *Launcher) coldLocked() bool {
	if l.cfg.InPlace {
		// A slot without a parked trainer starts its command, and pays
		// its start-up.
		g := l.guard
		if g == nil || g.spareSlots == 0 {
			return true
		}
		for slot := range g.spareSlots {
			if !g.parked[slot] {
				return true
			}
		}
		return false
	}
	if len(l.cfg.Preload) == 0 {
		return false
	}
	g := l.guard
	if g == nil || g.warmSlots == 0 {
		return true
	}
	for slot := range g.warmSlots {
		if !g.warmSettled[slot] {
			return true
		}
	}
	return false
}

// warmGoneLocked records that guard g's warm interpreters of the first
// nproc slots are gone (a start used them, a fence killed them): their
// replacements report when they are ready. A slot whose preloads failed
// stays so.
func (l *Launcher) warmGoneLocked(g *guardProc, nproc int) {
	for slot := range nproc {
		if g.warmSettled[slot] {
			delete(g.warmSettled, slot)
		}
	}
	l.warmNoticeLocked()
}

// warmNoticeLocked tells whoever waits on warmChanged that the warm
// interpreters changed.
func (l *Launcher) warmNoticeLocked() {
	close(l.warmChanged)
	l.warmChanged = make(chan struct{})
}
