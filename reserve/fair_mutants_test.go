package reserve_test

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/pacer-go/pacer/internal/fakeclock"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/lua"
	"github.com/pacer-go/pacer/reserve"
)

// fairMutants are the fair script (lua.Fair: core.lua, fair.lua and
// reserve.lua) with one rule of docs/design.md's "Fair share and lanes"
// broken each: a text of the script and what replaces it. Two mutants no
// property finds are left out (docs/testing.md): V not moved on when a
// tenant leaves (finish), and a deferred request not deferring the rest of
// its batch (reserve.lua; the same for a batch of one cost).
var fairMutants = []struct {
	name, from, to string
}{
	{"no turn: a tenant books past the others' starts",
		"if m and start > m + 1e-6 then", "if false then"},
	{"no weight: every tenant's pass moves by d",
		"pass = fair.start + fair.d / weight", "pass = fair.start + fair.d"},
	{"no priority: a lane is booked beside a higher one waiting",
		"        return false, retry\n      end\n    end\n    -- A lower lane", "      end\n    end\n    -- A lower lane"},
	{"no Batch horizon: the Batch lane books ahead like the others",
		"if lane < 3 then", "if lane < 4 then"},
	{"no horizon: a request books however far ahead",
		"horizon = math.max(d, hmin)\n    end", "horizon = 1e15\n    end"},
	{"V stands still while tenants book",
		"    if target > v then\n      v = target\n    end\n    if by_share then", "    if by_share then"},
	{"no minimum share",
		"if minshare > 0 and entitled_at <= now then", "if false then"},
	{"a refused AllowN keeps its tenant waiting",
		"local waiting = (deferred and kept) or last ~= '1'", "local waiting = deferred or last ~= '1'"},
	{"a lower lane's due minimum share does not go first",
		"if e and e <= now and least_waiting(l, nil) then", "if false then"},
	{"a due tenant keeps its horizon: plain calls hold it off",
		"if due_at and due_at <= now then", "if false then"},
}

type namedProp struct {
	name string
	prop fairProp
}

// fairPropsByCost are the fair rule's properties (fair_test.go), the
// quickest first.
var fairPropsByCost = []namedProp{
	{"lone tenant", fairLoneTenant},
	{"refused AllowN", fairRefusedAllow},
	{"beside plain calls", fairBesidePlain},
	{"policy bands", fairPolicyBands},
	{"min share", fairMinShare},
	{"urgent first", fairUrgentFirst},
	{"weighted shares", fairWeightedShares},
	{"newcomer", fairNewcomer},
	{"forgets tenants", fairForgets},
}

// foundBy is the property that found each mutant in the last runs, tried
// first: the cheaper ones before it pass on the mutant, whole (urgent
// first, 8 simulations of 520 slots, on the three found by weighted
// shares). A mutant it no longer finds is tried on the others, as before.
var foundBy = map[string]string{
	"no turn: a tenant books past the others' starts":              "weighted shares",
	"no weight: every tenant's pass moves by d":                    "weighted shares",
	"V stands still while tenants book":                            "weighted shares",
	"no priority: a lane is booked beside a higher one waiting":    "urgent first",
	"no Batch horizon: the Batch lane books ahead like the others": "urgent first",
	"no minimum share": "min share",
	"a lower lane's due minimum share does not go first":      "min share",
	"no horizon: a request books however far ahead":           "refused AllowN",
	"a refused AllowN keeps its tenant waiting":               "refused AllowN",
	"a due tenant keeps its horizon: plain calls hold it off": "beside plain calls",
}

// mutantProps is fairPropsByCost with the one that found mutant first.
func mutantProps(mutant string) []namedProp {
	props := slices.Clone(fairPropsByCost)
	if i := slices.IndexFunc(props, func(p namedProp) bool { return p.name == foundBy[mutant] }); i > 0 {
		first := props[i]
		props = slices.Insert(slices.Delete(props, i, i+1), 0, first)
	}
	return props
}

// TestFairMutants: each mutant of the fair script fails one of the fair
// rule's properties at least, so that those tests check the rule and not
// only that the script runs. The script itself (no mutant) passes them all
// (their own tests).
func TestFairMutants(t *testing.T) {
	s := redistest.New(t)
	for _, m := range fairMutants {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel() // each on keys of its own
			if n := strings.Count(lua.Fair, m.from); n != 1 {
				t.Fatalf("the mutant's text occurs %d times in the fair script, want once: update fairMutants to the script", n)
			}
			src := strings.Replace(lua.Fair, m.from, m.to, 1)
			newL := func(o reserve.Options) (*reserve.Limiter, *fakeclock.Clock) {
				l, clk := fairLimiterOn(t, s, o)
				reserve.UseFairScript(l, src)
				return l, clk
			}
			for _, p := range mutantProps(m.name) {
				if msg, failed := probe(t, func(pt testing.TB) { p.prop(pt, newL) }); failed {
					t.Logf("found by %s: %s", p.name, failure(msg))
					return
				}
			}
			t.Errorf("no property of the fair rule fails on the mutant")
		})
	}
}

// probe runs f with a stand-in for t that records a failure instead of
// failing t, and returns the first failure's message.
func probe(t *testing.T, f func(testing.TB)) (msg string, failed bool) {
	p := &probeT{T: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(p)
	}()
	<-done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.msg, p.failed
}

// probeT is a testing.TB whose failures are recorded (see probe); the rest
// is t's.
type probeT struct {
	*testing.T
	mu     sync.Mutex
	failed bool
	msg    string
}

func (p *probeT) record(msg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.failed {
		p.failed, p.msg = true, msg
	}
}

func (p *probeT) Fail()                          { p.record("failed") }
func (p *probeT) FailNow()                       { p.record("failed"); runtime.Goexit() }
func (p *probeT) Error(args ...any)              { p.record(fmt.Sprint(args...)) }
func (p *probeT) Errorf(format string, a ...any) { p.record(fmt.Sprintf(format, a...)) }
func (p *probeT) Fatal(args ...any)              { p.Error(args...); runtime.Goexit() }
func (p *probeT) Fatalf(format string, a ...any) { p.Errorf(format, a...); runtime.Goexit() }
func (p *probeT) Failed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.failed
}

// failure is the gist of a testify failure's message: its Error and
// Messages lines.
func failure(s string) string {
	var out []string
	for _, ln := range strings.Split(s, "\n") {
		ln = strings.TrimSpace(ln)
		if strings.HasPrefix(ln, "Error:") || strings.HasPrefix(ln, "Messages:") {
			out = append(out, strings.Join(strings.Fields(ln), " "))
		}
	}
	if len(out) == 0 {
		return strings.TrimSpace(s)
	}
	return strings.Join(out, "; ")
}
