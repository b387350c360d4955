package launcher

// replaceGuard starts a guard in place of g, which died by itself (killed
// from outside, by the OOM killer), with the warm interpreters g was asked
// for. The warm interpreters died with g, as everything of its tree must;
// their replacements import while the job stops and restarts, and the
// node's next start becomes them (still importing or ready) instead of
// importing cold beside them, so that the generation after has its warm
// interpreters ready too. The caller has swept what g left, so nothing of
// g's runs beside the new guard; and it calls before it tells g's
// processes' end, so that the next start finds the new guard. A guard the
// launcher killed or closed is not replaced here: the fence (Kill) must
// not wait for a guard's start, and Close ends them all. Nor is a
// replacement that dies before a start used it: a guard that dies again as
// it starts is left to the next start, not started again and again.
func (l *Launcher) replaceGuard(g *guardProc) {
	if g.ended.Load() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.guard != nil || l.replaced {
		return // closing, a start has already started one, or it was tried
	}
	l.replaced = true
	slots := max(g.warmSlots, g.spareSlots)
	next, err := l.guardLocked()
	if err != nil {
		l.logger.Warn("the process guard died; its replacement did not start: the next start tries again", "error", err)
		return
	}
	if slots == 0 {
		return
	}
	path, err := LookPath(l.cfg.Command[0])
	if err == nil {
		err = l.warmLocked(next, path, slots)
	}
	if err != nil {
		l.logger.Warn("the process guard died; its replacement keeps no warm interpreter", "error", err)
		return
	}
	l.logger.Info("the process guard died; a new one warms the node's interpreters", "slots", slots)
}
