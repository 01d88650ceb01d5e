package reserve_test

import (
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/fleet"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// childEnv carries a child's childSpec (see package internal/fleet).
const childEnv = "PACER_CHILD"

// childSpec is what each child of a process test does (see runProcesses).
type childSpec struct {
	Redis, Prefix string
	Rate          float64
	Burst         int
	Goroutines    int
	Start, End    int64 // Unix ns
	Policy        bool  // reserve testPolicy and settle (policyChild)
	Lease         bool  // reserve single permits on a hot key (leaseChild)
	Fair          bool  // reserve for tenants in lanes (fairChild)
	FairSet       int   // which of fairSets the fair child calls for
}

// The child side of the process tests: the test binary re-run with
// childEnv set runs childMain, policyChild, leaseChild or fairChild instead
// of the tests.
func TestMain(m *testing.M) {
	var spec childSpec
	if ok, err := fleet.Spec(childEnv, &spec); ok {
		if err == nil && spec.Policy {
			err = policyChild(spec)
		} else if err == nil && spec.Lease {
			err = leaseChild(spec)
		} else if err == nil && spec.Fair {
			err = fairChild(spec)
		} else if err == nil {
			err = childMain(spec)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	flag.Parse()
	if run := flag.Lookup("test.run"); testing.Short() && run.Value.String() == "" {
		// README's quick command (go test -short ./lua/ ./reserve/): the
		// core's contract on a redis-server, and the examples.
		if err := run.Value.Set(quickTests); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}

// quickTests is what -short runs of this package, unless -run says
// otherwise: every behaviour of the contract (contract_test.go) on a
// redis-server of its own, and the examples. The full suite runs the rest:
// the contract on Cluster, miniredis and a restricted ACL user, the fair
// rule's simulations, outages, fleets of processes.
const quickTests = `^(TestContractRedis|Example.*)$`

// childLimiter is a child's Limiter on s's Redis, returned once s.Start has
// come, with the run's end; done closes the Limiter and its client. Its
// CallTimeout is 10 s: the process tests judge the slots Redis grants, and
// on a loaded machine (CI beside other jobs) a call can take longer than
// the default 250 ms, which would switch the child to the local fallback.
func childLimiter(s childSpec) (l *reserve.Limiter, end time.Time, done func(), err error) {
	opts, err := redis.ParseURL(s.Redis)
	if err != nil {
		return nil, end, nil, err
	}
	rdb := redis.NewClient(opts)
	l, err = reserve.New(rdb, reserve.Options{KeyPrefix: s.Prefix, CallTimeout: 10 * time.Second})
	if err != nil {
		rdb.Close()
		return nil, end, nil, err
	}
	time.Sleep(time.Until(time.Unix(0, s.Start)))
	return l, time.Unix(0, s.End), func() { l.Close(); rdb.Close() }, nil
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// processRun is one run of a process test: children of this test binary
// (TestMain runs childMain, policyChild or leaseChild, by the spec), all
// starting a second from the run's start.
type processRun struct {
	Start, End time.Time
	Lines      [][]string // each child's output, by index
}

// runProcesses runs procs children doing spec for run from a second from
// now, calls during (if not nil) while they run, and returns their output
// once they have all exited; it fails t if one failed or printed nothing.
func runProcesses(t *testing.T, procs int, spec childSpec, run time.Duration, during func(start, end time.Time)) processRun {
	t.Helper()
	start := time.Now().Add(time.Second) // time for the children to start
	end := start.Add(run)
	spec.Start, spec.End = start.UnixNano(), end.UnixNano()
	f, err := fleet.Start(t.Context(), fleet.Options{Env: childEnv, Procs: procs, Args: []string{"-test.run=^$"}, Spec: spec})
	require.NoError(t, err)
	if during != nil {
		during(start, end)
	}
	_ = f.Wait() // each child's error is reported below
	out := processRun{Start: start, End: end, Lines: make([][]string, procs)}
	for _, c := range f.Children() {
		if err := c.Wait(); err != nil {
			t.Fatalf("child %d: %v\n%s", c.Index, err, c.Stderr())
		}
		require.NotEmpty(t, c.Lines(), "child %d made no calls", c.Index)
		out.Lines[c.Index] = c.Lines()
	}
	return out
}

// scanLine reads a child's output line into ptrs, failing t on a bad line.
func scanLine(t *testing.T, child int, line string, ptrs ...any) {
	t.Helper()
	if _, err := fmt.Sscan(line, ptrs...); err != nil {
		t.Fatalf("child %d: bad line %q: %v", child, line, err)
	}
}
