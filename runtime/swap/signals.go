package swap

import (
	"os"
	"os/signal"
	"sync"
)

// A process killed by a signal runs no deferred Close: a file tier's
// directory would stay behind after every SIGTERM of a launcher or mpirun
// ending a job, or a Ctrl-C. So while file tiers live, the package catches
// the terminating signals (SIGINT, SIGTERM, SIGHUP on Unix; os.Interrupt
// elsewhere), removes the live tiers' directories, and then ends the process
// as the signal would have: it stops catching the signal and sends it again
// (the exit status says "killed by signal N", as before). A program that
// handles those signals itself, to end in order, loses that handling while
// a file tier lives; it should close its tiers first. SIGKILL cannot be
// caught: the next NewFile under the same directory, or the launcher after
// the job (runtime/launch), removes what it leaves.
var liveDirs struct {
	sync.Mutex
	set  map[*fileMedium]struct{}
	stop chan struct{} // closed when the set empties: the catcher ends
}

// register adds f to the directories removed on a terminating signal,
// starting the catcher with the first.
func register(f *fileMedium) {
	liveDirs.Lock()
	defer liveDirs.Unlock()
	if len(liveDirs.set) == 0 {
		liveDirs.set = make(map[*fileMedium]struct{})
		liveDirs.stop = make(chan struct{})
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, caught()...)
		go catch(sigs, liveDirs.stop)
	}
	liveDirs.set[f] = struct{}{}
}

// unregister removes f (closed) from the set, ending the catcher with the
// last.
func unregister(f *fileMedium) {
	liveDirs.Lock()
	defer liveDirs.Unlock()
	if _, ok := liveDirs.set[f]; !ok {
		return
	}
	delete(liveDirs.set, f)
	if len(liveDirs.set) == 0 {
		close(liveDirs.stop)
	}
}

// caught are the terminating signals the catcher takes: those the process
// does not ignore. A signal ignored from the start (SIGHUP under nohup)
// stays ignored: catching it would turn what the user asked to ignore into
// the process's end.
func caught() []os.Signal {
	var l []os.Signal
	for _, s := range terminating {
		if !signal.Ignored(s) {
			l = append(l, s)
		}
	}
	return l
}

// catch waits for a terminating signal, removes the live directories and
// raises the signal again with its default action, or ends when stop is
// closed.
func catch(sigs chan os.Signal, stop chan struct{}) {
	defer signal.Stop(sigs)
	select {
	case <-stop:
		return
	case sig := <-sigs:
		liveDirs.Lock() // held until the process ends: no tier is made or closed meanwhile
		for f := range liveDirs.set {
			os.RemoveAll(f.dir)
		}
		signal.Reset(caught()...)
		raise(sig)
	}
}
