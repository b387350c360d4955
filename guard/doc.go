// Package guard is the process that owns a node's training processes.
//
// The sidecar cannot be trusted to kill its training processes on time: it
// can be frozen (SIGSTOP, a stuck runtime, a debugger), killed (SIGKILL, the
// OOM killer) or busy in a graceful stop when its lease runs out. So the
// sidecar does not start training processes itself. At start-up it starts
// one guard, the same binary re-executed, and asks it, over a socket pair,
// to start and stop each generation's processes. The guard
//
//   - is a child subreaper: every process below it that loses its parent is
//     re-parented to it, so nothing of the tree escapes, and a stop is done
//     only when it has no child left;
//   - holds the lease deadline that the sidecar extends after each renewal,
//     and kills the whole tree the moment it passes without an extension,
//     whatever the sidecar is doing; a deadline passed wins over a graceful
//     stop;
//   - kills the tree when the socket closes (the sidecar died);
//   - puts the tree in a cgroup v2 of its own where one is writable, and
//     kills it as a unit through cgroup.kill; without one, it kills each
//     process group and then every descendant it finds in /proc until none
//     is left;
//   - keeps, when asked (OpWarm), one warm Python interpreter per process
//     slot that has imported the preload modules and waits on a pipe; a
//     start becomes the user's command in it. Each is exec'd fresh (nothing
//     is forked after the imports), is killed by every fence, is left alone
//     by a generation's stop, and is never used once it was stopped;
//   - answers the training processes' fenced checkpoint commits on a local
//     socket: a rename is done only while the generation is current and the
//     deadline ahead, and is refused once the node is fenced.
//
// The guard is a small loop on one locked OS thread: it forks, reaps and
// kills from that thread, so Pdeathsig ties its children to the guard
// process and no other code can reap a child behind its back.
package guard
