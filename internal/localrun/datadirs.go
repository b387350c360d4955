package localrun

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// dataDirPrefix names the temporary directories run keeps etcd's data in
// when --data-dir is not given.
const dataDirPrefix = "coordinator-run-"

// unstartedDirAge is how old a data directory with no etcd log in it yet
// must be before it counts as left behind: a run creates its directory a
// moment before its etcd writes there.
const unstartedDirAge = time.Hour

// sweptDirs is what sweepDataDirs removed.
type sweptDirs struct {
	count int
	bytes int64
}

// sweepDataDirs removes the data directories in tmp that earlier runs
// left behind when they were killed (SIGKILL, a crash) before they could
// remove them. A directory is left behind when no etcd holds its
// write-ahead log: etcd locks the log's files while it runs, and the lock
// goes with the process, however it ends. Only this user's directories
// are looked at.
func sweepDataDirs(tmp string) sweptDirs {
	var swept sweptDirs
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return swept
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), dataDirPrefix) {
			continue
		}
		dir := filepath.Join(tmp, e.Name())
		info, err := e.Info()
		if err != nil {
			continue
		}
		if st, ok := info.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Getuid() {
			continue
		}
		if !leftBehind(dir, info.ModTime()) {
			continue
		}
		size := dirSize(dir)
		if os.RemoveAll(dir) == nil {
			swept.count++
			swept.bytes += size
		}
	}
	return swept
}

// leftBehind reports whether no run uses dir: its etcd's write-ahead log
// has files and none is locked, or it has none and dir is older than a run
// takes to start its etcd.
func leftBehind(dir string, modified time.Time) bool {
	wals, _ := filepath.Glob(filepath.Join(dir, "etcd", "member", "wal", "*.wal"))
	if len(wals) == 0 {
		return time.Since(modified) > unstartedDirAge
	}
	for _, wal := range wals {
		if locked(wal) {
			return false
		}
	}
	return true
}

// locked reports whether a process holds a lock on path, as etcd does on
// its log's files: an open file description lock (fcntl F_OFD_SETLK),
// where the kernel has them, else flock(2). A file that cannot be looked
// at counts as locked: nothing is removed on a guess.
func locked(path string) bool {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return !errors.Is(err, fs.ErrNotExist)
	}
	defer f.Close()
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0}
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_GETLK, &lk); err != nil || lk.Type != unix.F_UNLCK {
		return true
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return true
	}
	_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return false
}

// dirSize is the bytes of the files under dir.
func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}
