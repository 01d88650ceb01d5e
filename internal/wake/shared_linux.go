package wake

import (
	"container/heap"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// shared is the process's one precise timer: every Fine sleep of every
// Sleeper waits on it. A timerfd per sleep cost six system calls (create,
// arm, register with the poller, read, deregister, close); a fleet process
// waking tens of thousands of sleepers a second spent a third of its CPU
// there. The shared timer is armed for the earliest deadline; one goroutine
// reads it through Go's poller, wakes every sleeper whose deadline has
// come, and arms it for the next. It exists only while someone sleeps, and
// Linger after: the goroutine closes the timerfd and ends when no sleeper
// has come for Linger. (Closed as soon as the last sleeper left, a sleeper
// alone in its process, a cold key's Wait, made and closed a timerfd for
// itself: BenchmarkLoneSleep.)
//
// The timer is armed for Slack after the earliest deadline, and each expiry
// wakes every sleeper whose deadline has come: sleepers whose deadlines lie
// within Slack of each other share one expiry (arming the timer is a
// system call, and on a virtual machine an exit to the hypervisor). A
// sleeper wakes at most about Slack late for it, never early.
var shared sharedTimer

// Slack is how late after its deadline the shared timer may wake a sleeper
// so that sleepers close together share one expiry.
const Slack = 50 * time.Microsecond

// Linger is how long the shared timer outlives its last sleeper, waiting
// for the next: a timer armed once per Linger while nobody sleeps, and one
// parked goroutine.
const Linger = time.Second

type sharedTimer struct {
	mu      sync.Mutex
	waiters waiterHeap
	f       *os.File // the timerfd, while the goroutine runs; nil otherwise
	fd      int
	armed   time.Time // the deadline the timerfd is set for; zero: none
	// idleSince: when the goroutine woke the last sleeper and found none
	// left (it lingers until Linger after); zero while someone sleeps.
	idleSince time.Time
}

type waiter struct {
	deadline time.Time
	done     chan bool // receives whether the deadline has passed (false: the timer failed)
}

// sleep sleeps until deadline on the shared timer; false if the timerfd
// could not be made or set, or failed before the deadline (the caller
// sleeps the rest on Go's timer).
func (s *sharedTimer) sleep(deadline time.Time) bool {
	w := waiter{deadline: deadline, done: make(chan bool, 1)}
	s.mu.Lock()
	if s.f == nil {
		fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
		if err != nil {
			s.mu.Unlock()
			return false
		}
		s.fd, s.f, s.armed = fd, os.NewFile(uintptr(fd), "pacer-timerfd"), time.Time{}
		go s.loop(s.f)
	}
	heap.Push(&s.waiters, w)
	if at := deadline.Add(Slack); s.armed.IsZero() || at.Before(s.armed) {
		if !s.arm(at) {
			// Leave the waiter to the goroutine, which wakes it at the
			// next expiry or when the queue empties; this caller sleeps
			// on Go's timer instead.
			s.mu.Unlock()
			return false
		}
	}
	s.mu.Unlock()
	return <-w.done
}

// arm sets the timerfd to expire at t. s.mu is held.
func (s *sharedTimer) arm(t time.Time) bool {
	d := max(time.Until(t), time.Nanosecond) // a zero value would disarm it
	if err := unix.TimerfdSettime(s.fd, 0, &unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}, nil); err != nil {
		return false
	}
	s.armed = t
	return true
}

// loop wakes the sleepers whose deadlines have come each time f, the
// timerfd, expires, until none is left; then it closes f.
func (s *sharedTimer) loop(f *os.File) {
	var expirations [8]byte
	for {
		_, err := f.Read(expirations[:])
		s.mu.Lock()
		now := time.Now()
		woke := false
		for len(s.waiters) > 0 && (err != nil || !s.waiters[0].deadline.After(now)) {
			w := heap.Pop(&s.waiters).(waiter)
			w.done <- err == nil || !w.deadline.After(now)
			woke = true
		}
		if woke {
			s.idleSince = time.Time{} // the linger counts from the last sleeper woken
		}
		lingered := !s.idleSince.IsZero() && !now.Before(s.idleSince.Add(Linger))
		s.armed = time.Time{}
		if len(s.waiters) == 0 {
			if s.idleSince.IsZero() {
				s.idleSince = now
			}
			if err == nil && !lingered && s.arm(s.idleSince.Add(Linger)) {
				s.mu.Unlock()
				continue
			}
			s.f, s.idleSince = nil, time.Time{}
			s.mu.Unlock()
			f.Close()
			return
		}
		s.idleSince = time.Time{}
		if !s.arm(s.waiters[0].deadline.Add(Slack)) {
			// Wake them all; each sleeps out its rest on Go's timer.
			for len(s.waiters) > 0 {
				heap.Pop(&s.waiters).(waiter).done <- false
			}
			s.f, s.idleSince = nil, time.Time{}
			s.mu.Unlock()
			f.Close()
			return
		}
		s.mu.Unlock()
	}
}

// waiterHeap orders waiters by deadline (container/heap).
type waiterHeap []waiter

func (h waiterHeap) Len() int           { return len(h) }
func (h waiterHeap) Less(i, j int) bool { return h[i].deadline.Before(h[j].deadline) }
func (h waiterHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *waiterHeap) Push(x any)        { *h = append(*h, x.(waiter)) }
func (h *waiterHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	*h = old[:len(old)-1]
	return w
}
