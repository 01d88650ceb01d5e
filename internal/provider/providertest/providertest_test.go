package providertest

import (
	"fmt"
	"testing"
)

// tbRecorder is a testing.TB whose Errorf and Skipf are recorded: Skipf
// ends the checked function as the real one does (runtime.Goexit there, a
// panic recovered by expectRefusals here).
type tbRecorder struct {
	testing.TB
	errors, skips []string
}

type skipped struct{}

func (r *tbRecorder) Helper() {}
func (r *tbRecorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}
func (r *tbRecorder) Skipf(format string, args ...any) {
	r.skips = append(r.skips, fmt.Sprintf(format, args...))
	panic(skipped{})
}

// expectRefusals runs ExpectRefusals on a run that returns runs' figures in
// turn, and returns what it recorded and how many runs it made.
func expectRefusals(t *testing.T, limit, burst int, runs [][3]float64) (rec *tbRecorder, made int) {
	rec = &tbRecorder{TB: t}
	defer func() {
		if p := recover(); p != nil {
			if _, ok := p.(skipped); !ok {
				panic(p)
			}
		}
	}()
	ExpectRefusals(rec, limit, burst, func() (int, int, float64) {
		if made == len(runs) {
			t.Fatalf("ExpectRefusals made run %d, past the %d the case has", made+1, len(runs))
		}
		r := runs[made]
		made++
		return int(r[0]), int(r[1]), r[2]
	})
	return rec, made
}

// TestExpectRefusals: a run with a 429 passes, one that must have drawn a
// 429 and drew none fails the test, and a run too slow to draw one is made
// again once, then the test is skipped.
func TestExpectRefusals(t *testing.T) {
	const limit, burst = 14, 1
	fast := [3]float64{60, 0, 16}   // must have drawn a 429 (TestMustRefuse)
	slow := [3]float64{60, 0, 7.82} // could not have
	refused := [3]float64{60, 3, 16}
	for _, c := range []struct {
		name                string
		runs                [][3]float64
		made, errors, skips int
	}{
		{"refused", [][3]float64{refused}, 1, 0, 0},
		{"must have refused", [][3]float64{fast}, 1, 1, 0},
		{"slow, then refused", [][3]float64{slow, refused}, 2, 0, 0},
		{"slow, then must have refused", [][3]float64{slow, fast}, 2, 1, 0},
		{"slow twice", [][3]float64{slow, slow}, 2, 0, 1},
	} {
		rec, made := expectRefusals(t, limit, burst, c.runs)
		if made != c.made || len(rec.errors) != c.errors || len(rec.skips) != c.skips {
			t.Errorf("%s: %d runs, errors %q, skips %q; want %d runs, %d errors, %d skips",
				c.name, made, rec.errors, rec.skips, c.made, c.errors, c.skips)
		}
	}
}
