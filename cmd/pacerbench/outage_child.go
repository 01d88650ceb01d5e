package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"
)

// outageChildEnv carries an outage child's job (see package internal/fleet).
const outageChildEnv = "PACERBENCH_OUTAGE_CHILD"

// What an outage child paces with.
const (
	outagePacer = "pacer"       // the README's quick start
	outageRef   = "x/time/rate" // rate.NewLimiter(Rate/Procs, 1): no Redis, no coordination
)

// outageJob is what an outage child is told.
type outageJob struct {
	Variant    string // outagePacer or outageRef
	RedisURL   string
	Key        string
	Rate       float64 // the fleet's limit (burst 1); the reference paces at Rate/Procs
	Procs      int
	Goroutines int
	// ErrPause is how long a goroutine waits after a failed Wait before
	// it calls again (a worker's retry loop; no spinning).
	ErrPause time.Duration
}

// The lines an outage child prints on stdout, each in one write (see
// seamsOut), times in Unix ns:
//
//	ready            the process is up; nothing made yet (readyToStart)
//	n <ns> <ns>      the limiter made at the start: when New returned, how long it took
//	c <ns>           a Wait returned nil
//	e <ns> [text]    a Wait failed; the text when it differs from this
//	                 process's previous error's
//	f <ns> <0|1>     Metrics.Fallback: 1 to local pacing, 0 back on Redis
//	l <ns>           Metrics.Reserved with local set: the local fallback granted a reservation
//	end              the run is over and the limiter closed

// outageMetrics is an outage child's reserve.Metrics: switches and local
// grants, each a line when it happens.
type outageMetrics struct{ out seamsOut }

func (m outageMetrics) Reserved(_ string, _ []string, _ []float64, _ time.Duration, local bool) {
	if local {
		m.out.line('l', time.Now().UnixNano())
	}
}
func (outageMetrics) Moved(string, string)                   {}
func (outageMetrics) RedisCall(string, time.Duration, error) {}
func (outageMetrics) Paused(string, time.Duration)           {}
func (outageMetrics) Evictable(string)                       {}
func (m outageMetrics) Fallback(active bool) {
	m.out.line('f', time.Now().UnixNano(), boolDigit(active))
}

// runAsOutageChild runs this process as one process of an outage fleet,
// if it is one, and returns its exit code and true.
func runAsOutageChild() (code int, isChild bool) {
	return runChild(outageChildEnv, "pacerbench outage child", outageChild)
}

// outageChild is one process of an outage fleet: "ready", the start and
// end from stdin; at the start it makes its limiter (pacer as the README's
// quick start makes it, or the reference), then j.Goroutines goroutines
// call Wait on j.Key until the end, each return a line.
func outageChild(j outageJob) error {
	var out seamsOut
	end, err := readyToStart()
	if err != nil {
		return err
	}
	made := time.Now()
	var (
		wait func(context.Context) error
		done func() error
	)
	switch j.Variant {
	case outagePacer:
		// README's quick start, line for line: go-redis's log to slog
		// at Debug, a plain client, New with RequireRedis. Metrics is
		// the one field added, to see the switches.
		redis.SetLogger(reserve.RedisLogger(slog.Default()))
		rdb, err := quickStartClient(j.RedisURL)
		if err != nil {
			return err
		}
		defer rdb.Close()
		l, err := reserve.New(rdb, reserve.Options{RequireRedis: true, Metrics: outageMetrics{out}})
		if err != nil {
			return err
		}
		lim := reserve.Limit{Rate: j.Rate, Burst: 1}
		wait = func(ctx context.Context) error { return l.Wait(ctx, j.Key, lim) }
		done = l.Close
	case outageRef:
		l := rate.NewLimiter(rate.Limit(j.Rate/float64(j.Procs)), 1)
		wait = l.Wait
		done = func() error { return nil }
	default:
		return fmt.Errorf("no variant %q", j.Variant)
	}
	out.line('n', time.Now().UnixNano(), strconv.FormatInt(int64(time.Since(made)), 10))

	// No deadline on the calls (a worker's Wait has none): at the end the
	// context is canceled, and a Wait still sleeping returns.
	ctx, cancel := context.WithCancel(context.Background())
	stop := time.AfterFunc(time.Until(end), cancel)
	defer stop.Stop()
	var (
		mu   sync.Mutex
		last string
	)
	failed := func(at time.Time, err error) {
		text := strings.Join(strings.Fields(err.Error()), " ")
		mu.Lock()
		defer mu.Unlock()
		if text == last {
			out.line('e', at.UnixNano())
			return
		}
		last = text
		out.line('e', at.UnixNano(), text)
	}
	var wg sync.WaitGroup
	for range j.Goroutines {
		wg.Go(func() {
			for {
				err := wait(ctx)
				t1 := time.Now()
				if ctx.Err() != nil || !t1.Before(end) {
					return
				}
				if err != nil {
					failed(t1, err)
					select {
					case <-ctx.Done():
						return
					case <-time.After(j.ErrPause):
					}
					continue
				}
				out.line('c', t1.UnixNano())
			}
		})
	}
	wg.Wait()
	if err := done(); err != nil && !errors.Is(err, reserve.ErrClosed) {
		return err
	}
	fmt.Println("end")
	return nil
}

// outageProc is what one outage child printed.
type outageProc struct {
	Made, MakeTook int64   // when the limiter was made (Unix ns), how long New took (ns)
	Calls          []int64 // Unix ns, in the order printed
	Errors         []outageErr
	Switches       []seamsEvent // What: "1" to local pacing, "0" back on Redis
	Local          []int64      // local grants, Unix ns
}

// outageErr is a failed Wait.
type outageErr struct {
	At   int64
	Text string
}

// readOutageChild parses an outage child's lines.
func readOutageChild(lines []string) (outageProc, error) {
	var p outageProc
	if len(lines) == 0 || lines[0] != "ready" {
		return p, errors.New("no ready line")
	}
	ended, last := false, ""
	for _, line := range lines[1:] {
		if line == "end" {
			ended = true
			continue
		}
		f := strings.SplitN(line, " ", 3)
		if len(f) < 2 || len(f[0]) != 1 {
			return p, fmt.Errorf("bad line %q", line)
		}
		at, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return p, fmt.Errorf("bad line %q", line)
		}
		rest := ""
		if len(f) == 3 {
			rest = f[2]
		}
		switch f[0] {
		case "n":
			took, err := strconv.ParseInt(rest, 10, 64)
			if err != nil {
				return p, fmt.Errorf("bad line %q", line)
			}
			p.Made, p.MakeTook = at, took
		case "c":
			p.Calls = append(p.Calls, at)
		case "e":
			if rest != "" {
				last = rest
			}
			p.Errors = append(p.Errors, outageErr{at, last})
		case "f":
			p.Switches = append(p.Switches, seamsEvent{at, rest})
		case "l":
			p.Local = append(p.Local, at)
		default:
			return p, fmt.Errorf("bad line %q", line)
		}
	}
	if !ended {
		return p, errors.New("no end line")
	}
	return p, nil
}
