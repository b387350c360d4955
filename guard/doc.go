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
//   - starts beside each process a fence watchdog in its process group and
//     cgroup leaf, which kills the process's tree at the deadline on the
//     sidecar's DeadlinePage and answers its commits by the guard's rules,
//     on a socket the guard binds before the process starts: a guard
//     frozen with its sidecar neither keeps a trainer alive past the
//     deadline nor costs it a checkpoint before it;
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
//     deadline ahead, and is refused once the node is fenced;
//   - gives each process it starts a progress page of its own (a memfd:
//     descriptor 3 of a cold start, 5 of a warm interpreter, named by
//     ELASTIC_PROGRESS_FD), where the trainer counts its steps and names
//     the signal that writes its Python stack. For a start with a Watch it
//     samples the pages and the processes' states on its loop, and reports
//     a rank hung (EventHung) that was quiet for longer than the timeout,
//     fixed or learned from the steps of every generation it ran, or that
//     was found stopped for more than half a second; and the ranks' progress
//     about once a second while they step (EventProgress). It does not act
//     on a hang itself. A stop with Stacks has each rank write its stack
//     before it is killed; a graceful stop does so for the blocked ranks,
//     which it kills at once, and gives the others their grace period.
//
// The guard is a small loop on one locked OS thread: it forks, reaps and
// kills from that thread, so Pdeathsig ties its children to the guard
// process and no other code can reap a child behind its back.
package guard
