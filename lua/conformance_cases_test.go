package lua_test

import (
	"fmt"
	"maps"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// t0 is the client clock's now of every check (docs/protocol.md's
// examples' too): Unix µs.
const t0 = int64(1700000000000000)

// at returns t0 + us as ARGV[1].
func at(us int64) string { return strconv.FormatInt(t0+us, 10) }

// common returns docs/protocol.md's "Common arguments": now_us (t0 + us),
// now_ns, the format and share, the units, and the bands (k first).
func common(us int64, ns int, share, units string, bands ...string) []string {
	return append([]string{at(us), strconv.Itoa(ns), share, units}, bands...)
}

// limit returns a Limit's bands: k = 1, one bucket named permits.
func limit(rate, burst string) []string { return []string{"1", "permits", "1", "b", rate, burst} }

// threeBands is "Common arguments"' policy of three bands: 2 requests per
// second (burst 2), 1000 tokens per second (burst 6000), 3 requests per
// UTC day.
var threeBands = []string{"3", "rps", "1", "b", "2", "2", "tps", "2", "b", "1000", "6000", "daily", "1", "w", "3", "86400000000:0"}

// reply is Reserve's ("Reserve").
type reply struct {
	nowUS, nowNS int64
	waits, seqs  []int64
	state        string
	stored       string
	bands        []string // the binding band per request: a name, "~p" or "~"
}

// reserveKeys are Reserve's KEYS ("Reserve").
func (c *conn) reserveKeys(k string) []string {
	return []string{c.key(k, ""), c.key(k, ":limit"), c.key(k, ":shadow")}
}

// reserve runs Reserve on key k with args (the common ones, then its own)
// and checks its reply's shape: now_us, now_ns, m pairs, the state, the
// stored limit, the binding bands (one word per request).
func (c *conn) reserve(k string, args ...string) reply {
	c.t.Helper()
	v := c.mustEval("RESERVE", c.reserveKeys(k), args...)
	a, ok := v.([]any)
	if !ok || len(a) < 5 || len(a)%2 != 1 {
		c.t.Fatalf("docs/protocol.md, Reserve: reply %s: want now_us, now_ns, wait_ns and seq per request, state, stored limit, binding bands", show(v))
	}
	var r reply
	ints := func(x any) int64 {
		n, ok := x.(int64)
		if !ok {
			c.t.Fatalf("docs/protocol.md, Reserve: reply %s: %s is not an integer", show(v), show(x))
		}
		return n
	}
	r.nowUS, r.nowNS = ints(a[0]), ints(a[1])
	for i := 2; i < len(a)-3; i += 2 {
		r.waits = append(r.waits, ints(a[i]))
		r.seqs = append(r.seqs, ints(a[i+1]))
	}
	var ok1, ok2, ok3 bool
	r.state, ok1 = a[len(a)-3].(string)
	r.stored, ok2 = a[len(a)-2].(string)
	bys, ok3 := a[len(a)-1].(string)
	if !ok1 || !ok2 || !ok3 {
		c.t.Fatalf("docs/protocol.md, Reserve: reply %s: the last three are not strings", show(v))
	}
	r.bands = strings.Fields(bys)
	if len(r.bands) != len(r.waits) {
		c.t.Fatalf("docs/protocol.md, Reserve: reply %s: %d binding bands for %d requests", show(v), len(r.bands), len(r.waits))
	}
	if r.state != "" {
		c.parse(r.state)
	}
	return r
}

// requests returns Reserve's own arguments: no floor, then m requests of
// max_wait_us and costs.
func requests(m int, maxWait string, costs ...string) []string {
	out := []string{"", strconv.Itoa(m)}
	for range m {
		out = append(out, maxWait)
		out = append(out, costs...)
	}
	return out
}

// ceilDiv returns ceil(k * 1e9 / rate), rate a decimal string.
func ceilDiv(k int64, rate string) int64 {
	r, _ := new(big.Rat).SetString(rate)
	q := new(big.Rat).Quo(new(big.Rat).SetInt64(k*1_000_000_000), r)
	n, d := q.Num(), q.Denom()
	z, m := new(big.Int).DivMod(n, d, new(big.Int))
	if m.Sign() != 0 {
		z.Add(z, big.NewInt(1))
	}
	return z.Int64()
}

// TestConformanceSpacing: a Limit's reservations on an absent key get the
// burst at once, then slots exactly cost/rate apart on the ns grid,
// rounded up, numbered 1, 2, ...; the state is written in the format asked
// for, with the bucket's z and e and an expiry once the bucket is full
// again plus 1 to 2 s (docs/protocol.md: Reserve, Common arguments, The
// state, Keys).
func TestConformanceSpacing(t *testing.T) {
	c := newConn(t)
	const m = 6
	n := 0
	for _, rate := range []string{"10", "3", "7", "0.5", "1000000"} {
		for _, burst := range []int64{1, 2} {
			for _, ns := range []int{0, 999} {
				for _, fs := range []struct {
					format int
					share  string
				}{{1, "f1 1"}, {2, "1"}} { // in order: the cases' file records them so
					format, share := fs.format, fs.share
					n++
					key := fmt.Sprintf("spacing:%d", n)
					what := fmt.Sprintf("Reserve(rate %s, burst %d, now_ns %d, format %d)", rate, burst, ns, format)
					args := append(common(0, ns, share, "permits", limit(rate, strconv.FormatInt(burst, 10))...), requests(m, "-1", "1")...)
					r := c.reserve(key, args...)
					if r.nowUS != t0 || r.nowNS != int64(ns) || len(r.waits) != m {
						t.Fatalf("%s: now %d %d, %d requests; want %d %d, %d", what, r.nowUS, r.nowNS, len(r.waits), t0, ns, m)
					}
					for i := range int64(m) {
						want := ceilDiv(max(0, i+1-burst), rate)
						if r.waits[i] != want || r.seqs[i] != i+1 {
							t.Errorf("%s: request %d: wait %d seq %d, want %d %d", what, i, r.waits[i], r.seqs[i], want, i+1)
						}
					}
					if r.stored != "" {
						t.Errorf("%s: stored limit %q, want \"\"", what, r.stored)
					}
					st := c.parse(r.state)
					if got := c.get(c.key(key, "")); got != r.state {
						t.Errorf("%s: GET = %q, want the state replied %q", what, got, r.state)
					}
					b, ok := st.band("permits")
					r0, _ := new(big.Rat).SetString(rate)
					fr, _ := r0.Float64()
					z := float64(m-burst)*1e9/fr + float64(ns) // exact to far below the 5e-4 of the format
					if st.format != format || st.t != t0 || st.seq != m || st.pause != 0 || st.stored || !ok ||
						math.Abs(b.z-z) > 6e-4 || b.e != float64(int64(ns)+r.waits[m-1]) {
						t.Errorf("%s: state %q: want format %d, t %d, s %d, p 0, z %.3f, e %d", what, r.state, format, t0, m, z, int64(ns)+r.waits[m-1])
					}
					full := z + float64(burst)*1e9/fr // ns after t
					x := float64(st.x) * 1e6
					if format == 1 {
						x = float64(st.x)
					}
					if x < full+1e9 || x > full+2e9+1e6 {
						t.Errorf("%s: state %q: expiry %v ns after t, want 1 to 2 s after the bucket is full (%v)", what, r.state, x, full)
					}
					pttl, _ := c.do("PTTL", c.key(key, ""))
					if p, _ := pttl.(int64); p <= 0 || float64(p) > x/1e6 {
						t.Errorf("%s: PTTL %v, want in (0, x]", what, pttl)
					}
				}
			}
		}
	}
}

// TestConformanceFormats: a key written in format 1 and 2 in turn replies
// exactly as one written in format 2 throughout: each format is read, and
// written as ARGV[3] asks (docs/protocol.md: The state, Versions).
func TestConformanceFormats(t *testing.T) {
	c := newConn(t)
	pol := append([]string{"requests tokens"}, threeBands...)
	for i := range int64(12) {
		now := i * 37_000
		share := "1"
		if i%2 == 0 {
			share = "f1 1"
		}
		costs := []string{"1", strconv.FormatInt(100*i, 10)}
		a := c.reserve("twin:a", append(common(now, 0, "1", pol[0], pol[1:]...), requests(1, "-1", costs...)...)...)
		b := c.reserve("twin:b", append(common(now, 0, share, pol[0], pol[1:]...), requests(1, "-1", costs...)...)...)
		if !slices.Equal(a.waits, b.waits) || !slices.Equal(a.seqs, b.seqs) {
			t.Fatalf("step %d: format 2 throughout: %v %v; formats in turn: %v %v", i, a.waits, a.seqs, b.waits, b.seqs)
		}
		sa, sb := c.parse(a.state), c.parse(b.state)
		want := 2
		if share != "1" {
			want = 1
		}
		if sb.format != want || sa.format != 2 {
			t.Errorf("step %d: formats %d and %d, want 2 and %d", i, sa.format, sb.format, want)
		}
		if sa.t != sb.t || sa.seq != sb.seq || sa.pause != sb.pause || len(sa.recs) != len(sb.recs) {
			t.Fatalf("step %d: %q and %q differ", i, a.state, b.state)
		}
		for j, ra := range sa.recs {
			rb := sb.recs[j]
			if ra.name != rb.name || ra.window != rb.window || math.Abs(ra.z-rb.z) > 1e-3 || math.Abs(ra.e-rb.e) > 1e-3 || ra.w != rb.w || ra.u != rb.u {
				t.Errorf("step %d: record %d: %q and %q differ", i, j, a.state, b.state)
			}
		}
	}
	// Rewrite turns format 2 into 1 and back, changing nothing it means.
	for _, share := range []string{"f1 1", "1"} {
		v := c.mustEval("REWRITE", c.reserveKeys("twin:a")[:2], common(444_000, 0, share, "permits", "0")...)
		s, _ := v.(string)
		if st := c.parse(s); (share == "1") != (st.format == 2) || c.get(c.key("twin:a", "")) != s {
			t.Errorf("Rewrite with %q: %q", share, s)
		}
	}
	a := c.reserve("twin:a", append(common(445_000, 0, "1", pol[0], pol[1:]...), requests(1, "-1", "1", "5")...)...)
	b := c.reserve("twin:b", append(common(445_000, 0, "1", pol[0], pol[1:]...), requests(1, "-1", "1", "5")...)...)
	if !slices.Equal(a.waits, b.waits) || a.state != b.state {
		t.Errorf("after Rewrite: %v %q, want %v %q", a.waits, a.state, b.waits, b.state)
	}
}

// TestConformanceWindow: the three-band policy's daily window holds 3;
// a fourth request is refused with its maximum wait, writing nothing, and
// granted without one at the next window's start (docs/protocol.md:
// Reserve, The state).
func TestConformanceWindow(t *testing.T) {
	c := newConn(t)
	args := func(us int64, m int, maxWait string, costs ...string) []string {
		return append(common(us, 250, "1", "requests tokens", threeBands...), requests(m, maxWait, costs...)...)
	}
	r := c.reserve("w", args(0, 3, "-1", "1", "10")...)
	if !slices.Equal(r.waits, []int64{0, 0, 500_000_000}) || !slices.Equal(r.seqs, []int64{1, 2, 3}) {
		t.Fatalf("3 requests: waits %v seqs %v", r.waits, r.seqs)
	}
	if !slices.Equal(r.bands, []string{"~", "~", "rps"}) {
		t.Errorf("3 requests: binding bands %q, want ~ ~ rps (the third waits for the rps bucket)", r.bands)
	}
	before := c.get(c.key("w", ""))
	next := (t0/86_400_000_000+1)*86_400_000_000_000 - (t0*1000 + 250) // ns to the next UTC day
	r = c.reserve("w", args(0, 1, "5000000", "1", "10")...)
	if r.waits[0] != next || r.seqs[0] != 0 || r.bands[0] != "daily" || r.state != before || c.get(c.key("w", "")) != before {
		t.Errorf("refused: wait %d seq %d band %s state %q; want %d, 0, daily, unchanged %q", r.waits[0], r.seqs[0], r.bands[0], r.state, next, before)
	}
	r = c.reserve("w", args(0, 1, "-1", "1", "10")...)
	st := c.parse(r.state)
	d, _ := st.band("daily")
	if r.waits[0] != next || r.seqs[0] != 4 || !d.window || d.w != t0/86_400_000_000+1 || d.u != 1 {
		t.Errorf("granted: wait %d seq %d state %q; want %d, 4, daily w%d 1", r.waits[0], r.seqs[0], r.state, next, t0/86_400_000_000+1)
	}
}

// TestConformanceCancel: cancel gives back what later reservations have
// not built on, once; a passed slot gets nothing back; settle charges the
// difference (docs/protocol.md: Adjust).
func TestConformanceCancel(t *testing.T) {
	c := newConn(t)
	lim := limit("10", "1")
	keys := []string{c.key("c", ""), c.key("c", ":limit"), c.key("c", ":done")}
	// adjust returns the reply's applied (docs/protocol.md: Adjust), and
	// checks that its state is the key's.
	adjust := func(us int64, op string, slotUS int64, seq string, costs ...string) any {
		args := append(common(us, 0, "1", "permits", lim...), op, at(slotUS), "0", seq)
		v := c.mustEval("ADJUST", keys, append(args, costs...)...)
		reply, ok := v.([]any)
		if !ok || len(reply) != 2 {
			t.Fatalf("Adjust's reply %#v: want [applied, state]", v)
		}
		if state, _ := reply[1].(string); state != c.get(keys[0]) {
			t.Errorf("Adjust's state %q, the key's %q", state, c.get(keys[0]))
		}
		return reply[0]
	}
	one := func(us int64) reply {
		return c.reserve("c", append(common(us, 0, "1", "permits", lim...), requests(1, "-1", "1")...)...)
	}
	r := c.reserve("c", append(common(0, 0, "1", "permits", lim...), requests(3, "-1", "1")...)...)
	if !slices.Equal(r.waits, []int64{0, 100_000_000, 200_000_000}) {
		t.Fatalf("waits %v", r.waits)
	}
	// The second: the third built on it, nothing comes back.
	if v := adjust(1, "cancel", 100_000, "2", "1"); v != int64(1) {
		t.Errorf("cancel 2 = %v, want 1", v)
	}
	if r = one(2); r.waits[0] != 300_000_000-2000 || r.seqs[0] != 4 {
		t.Errorf("after cancel 2: wait %d seq %d, want %d 4", r.waits[0], r.seqs[0], 300_000_000-2000)
	}
	// The last: its slot comes back.
	if v := adjust(3, "cancel", 300_000, "4", "1"); v != int64(1) {
		t.Errorf("cancel 4 = %v, want 1", v)
	}
	if r = one(4); r.waits[0] != 300_000_000-4000 || r.seqs[0] != 5 {
		t.Errorf("after cancel 4: wait %d seq %d, want %d 5", r.waits[0], r.seqs[0], 300_000_000-4000)
	}
	// Sent twice, once.
	if v := adjust(5, "cancel", 100_000, "2", "1"); v != int64(0) {
		t.Errorf("cancel 2 again = %v, want 0", v)
	}
	if got := c.get(keys[2]); got != "2 4" {
		t.Errorf("%s = %q, want \"2 4\"", keys[2], got)
	}
	// A slot that has passed: applied, nothing given back.
	before := c.get(keys[0])
	if v := adjust(10_000, "cancel", 0, "1", "1"); v != int64(1) || c.get(keys[0]) != before {
		t.Errorf("cancel of a passed slot = %v, state %q; want 1, unchanged %q", v, c.get(keys[0]), before)
	}
	// Settle at 3: the next slot moves 200 ms later; at 0: back again.
	if v := adjust(20_000, "settle", 300_000, "5", "1", "3"); v != int64(1) {
		t.Errorf("settle 5 = %v, want 1", v)
	}
	if r = one(20_001); r.waits[0] != 600_000_000-20_001_000 || r.seqs[0] != 6 {
		t.Errorf("after settle 5 at 3: wait %d seq %d, want %d 6", r.waits[0], r.seqs[0], 600_000_000-20_001_000)
	}
	if v := adjust(20_002, "settle", 600_000, "6", "1", "0"); v != int64(1) {
		t.Errorf("settle 6 = %v, want 1", v)
	}
	if r = one(20_003); r.waits[0] != 600_000_000-20_003_000 || r.seqs[0] != 7 {
		t.Errorf("after settle 6 at 0: wait %d seq %d, want %d 7", r.waits[0], r.seqs[0], 600_000_000-20_003_000)
	}
}

// TestConformancePause: no slot before the pause's end, and the bucket
// empty then; a shorter pause changes nothing; a pause with k = 0 acts on
// every record (docs/protocol.md: Pause, The state).
func TestConformancePause(t *testing.T) {
	c := newConn(t)
	lim := limit("4", "2")
	pkeys := c.reserveKeys("p")[:2]
	v := c.mustEval("PAUSE", pkeys, append(common(0, 0, "1", "permits", lim...), "1500000")...)
	if want := fmt.Sprintf("[%d, 0, 1500000000, 0, %q]", t0, c.get(pkeys[0])); show(v) != want {
		t.Errorf("Pause = %s, want %s (the reply ends with the state)", show(v), want)
	}
	st := c.parse(c.get(pkeys[0]))
	b, _ := st.band("permits")
	if st.pause != 1.5e9 || b.z != 1.5e9 {
		t.Errorf("paused state: p %v, z %v; want 1500000000, 1500000000", st.pause, b.z)
	}
	r := c.reserve("p", append(common(1, 0, "1", "permits", lim...), requests(1, "-1", "1")...)...)
	if r.waits[0] != 1_750_000_000-1000 || r.seqs[0] != 1 || r.bands[0] != "~p" {
		t.Errorf("after the pause: wait %d seq %d band %s, want %d (the pause's end + 1/rate) 1 ~p", r.waits[0], r.seqs[0], r.bands[0], 1_750_000_000-1000)
	}
	// On a twin key, two: the first after the pause is the pause's, the
	// second waits for the bucket (its queue lies beyond the pause).
	c.mustEval("PAUSE", c.reserveKeys("p2")[:2], append(common(0, 0, "1", "permits", lim...), "1500000")...)
	if r := c.reserve("p2", append(common(1, 0, "1", "permits", lim...), requests(2, "-1", "1")...)...); !slices.Equal(r.bands, []string{"~p", "permits"}) {
		t.Errorf("two after the pause: bands %q, want ~p permits", r.bands)
	}
	before := c.parse(c.get(pkeys[0]))
	v = c.mustEval("PAUSE", pkeys, append(common(2, 0, "1", "permits", lim...), "1000000")...)
	after := c.parse(c.get(pkeys[0]))
	if show(v) != fmt.Sprintf("[%d, 0, %d, 1, %q]", t0+2, 1_500_000_000-2000, c.get(pkeys[0])) ||
		float64(after.t*1000)+after.pause != float64(before.t*1000)+before.pause {
		t.Errorf("a shorter pause = %s, state %+v; want the longer one in force", show(v), after)
	}
	// k = 0: every record of the three-band policy, buckets empty at the end.
	c.reserve("p3", append(common(0, 0, "1", "requests tokens", threeBands...), requests(1, "-1", "1", "10")...)...)
	c.mustEval("PAUSE", c.reserveKeys("p3")[:2], common(0, 0, "1", "permits", "0", "2000000")...)
	st = c.parse(c.get(c.key("p3", "")))
	for _, name := range []string{"rps", "tps"} {
		if b, ok := st.band(name); !ok || b.z != 2e9 {
			t.Errorf("pause with k = 0: %s's record %+v, want z 2000000000", name, b)
		}
	}
	r = c.reserve("p3", append(common(0, 0, "1", "requests tokens", threeBands...), requests(1, "-1", "1", "10")...)...)
	if r.waits[0] != 2_500_000_000 {
		t.Errorf("after a pause with k = 0: wait %d, want 2500000000", r.waits[0])
	}
}

// TestConformanceLostHorizon: a floor "!<h2>[:<seq>]" (docs/protocol.md,
// Reserve's floor) applies only to a key Redis lost: no state, or a state
// whose last reservation is numbered before seq. Then every bucket is empty
// until now + h2; otherwise it floors nothing and writes nothing.
func TestConformanceLostHorizon(t *testing.T) {
	c := newConn(t)
	lim := limit("10", "1") // 100 ms apart
	withFloor := func(us int64, floor string) []string {
		a := append(common(us, 0, "1", "permits", lim...), requests(1, "-1", "1")...)
		a[len(common(us, 0, "1", "permits", lim...))] = floor
		return a
	}
	// No state (Redis restarted empty): the slots it granted before it
	// forgot them are not granted again.
	if r := c.reserve("lost", withFloor(0, "!500000:7")...); r.waits[0] != 600_000_000 || r.seqs[0] != 1 {
		t.Errorf("no state, horizon 500 ms: wait %d seq %d, want 600000000 (after the horizon, 1/rate) 1", r.waits[0], r.seqs[0])
	}
	// A state numbered at or after seq knows its own schedule.
	c.reserve("known", withFloor(0, "")...) // seq 1, z 100 ms
	state := c.get(c.key("known", ""))
	if r := c.reserve("known", withFloor(0, "!500000:1")...); r.waits[0] != 100_000_000 || r.seqs[0] != 2 {
		t.Errorf("state numbered 1, horizon seq 1: wait %d seq %d, want 100000000 2 (the horizon ignored)", r.waits[0], r.seqs[0])
	}
	// A state numbered before seq (rebuilt since, or a replica that
	// missed the latest writes): the horizon applies.
	c.reserve("behind", withFloor(0, "")...) // seq 1
	if r := c.reserve("behind", withFloor(0, "!500000:5")...); r.waits[0] != 600_000_000 || r.seqs[0] != 2 {
		t.Errorf("state numbered 1, horizon seq 5: wait %d seq %d, want 600000000 2", r.waits[0], r.seqs[0])
	}
	// m = 0: the horizon alone writes nothing to a key it does not apply
	// to, and floors a lost one.
	before := c.get(c.key("known", ""))
	if before == state {
		t.Fatalf("the second reservation left the state as it was: %q", state)
	}
	for _, floor := range []string{"!900000:1", "!900000:2"} {
		c.mustEval("RESERVE", c.reserveKeys("known"), append(common(0, 0, "1", "permits", lim...), floor, "0")...)
		if got := c.get(c.key("known", "")); got != before {
			t.Errorf("floor %s on a state numbered 2 wrote %q over %q", floor, got, before)
		}
	}
	c.mustEval("RESERVE", c.reserveKeys("gone"), append(common(0, 0, "1", "permits", lim...), "!900000", "0")...)
	if r := c.reserve("gone", withFloor(0, "")...); r.waits[0] != 1_000_000_000 {
		t.Errorf("after a horizon alone on a lost key: wait %d, want 1000000000", r.waits[0])
	}
	// A malformed horizon is refused, and changes nothing.
	if _, err := c.eval("RESERVE", c.reserveKeys("bad"), withFloor(0, "!x")...); err == nil || !strings.HasPrefix(err.Error(), "PACER_ARG") {
		t.Errorf("floor \"!x\": err %v, want PACER_ARG", err)
	}
	if got := c.get(c.key("bad", "")); got != "" {
		t.Errorf("a refused call wrote %q", got)
	}
}

// TestConformanceStale: a call whose share argument carries a deadline
// ("d<ms> ", docs/protocol.md, Common arguments) that Redis runs after it
// is refused with PACER_STALE and changes nothing, on the fast path and the
// general one; before it, the call is served as without; a client clock
// (ARGV[1] set) ignores it.
func TestConformanceStale(t *testing.T) {
	c := newConn(t)
	now, _ := c.do("TIME")
	nowMS := func() int64 { s, _ := strconv.ParseInt(now.([]any)[0].(string), 10, 64); return s * 1000 }()
	past, future := "d"+strconv.FormatInt(nowMS-1000, 10)+" ", "d"+strconv.FormatInt(nowMS+60_000, 10)+" "
	c.volatile(nowMS-1000, "{ms-1000}")
	c.volatile(nowMS+60_000, "{ms+60000}")
	serverArgs := func(share string, bands ...string) []string {
		a := append([]string{"", "0", share, "permits"}, bands...)
		return append(a, requests(1, "-1", "1")...)
	}
	for _, tc := range []struct {
		name  string
		bands []string
	}{
		{"a Limit (fast.lua)", limit("10", "1")},
		{"two bands (core.lua)", []string{"2", "a", "1", "b", "10", "1", "b", "1", "b", "5", "2"}},
	} {
		k := strings.ReplaceAll(tc.name, " ", "")
		if _, err := c.eval("RESERVE", c.reserveKeys(k), serverArgs(past+"1", tc.bands...)...); code(err) != "PACER_STALE" {
			t.Errorf("%s: a call run after its deadline: %v, want PACER_STALE", tc.name, err)
		}
		if got := c.get(c.key(k, "")); got != "" {
			t.Errorf("%s: a stale call wrote %q", tc.name, got)
		}
		if _, err := c.eval("RESERVE", c.reserveKeys(k), serverArgs(future+"1", tc.bands...)...); err != nil {
			t.Errorf("%s: a call before its deadline: %v", tc.name, err)
		}
		if _, err := c.eval("RESERVE", c.reserveKeys(k), serverArgs(future+"f1 1", tc.bands...)...); err != nil {
			t.Errorf("%s: a deadline, then a format: %v", tc.name, err)
		}
	}
	// A client clock: the deadline means nothing on it.
	if _, err := c.eval("RESERVE", c.reserveKeys("client"), append(common(0, 0, past+"1", "permits", limit("10", "1")...), requests(1, "-1", "1")...)...); err != nil {
		t.Errorf("a deadline with a client clock: %v, want it ignored", err)
	}
	if _, err := c.eval("RESERVE", c.reserveKeys("bad"), serverArgs("dx 1", limit("10", "1")...)...); code(err) != "PACER_ARG" {
		t.Errorf("a malformed deadline: %v, want PACER_ARG", err)
	}
}

// TestConformanceBadArguments: each malformed call is refused with its
// code and changes nothing, on an absent key and on a state (docs/
// protocol.md: Errors, Common arguments).
func TestConformanceBadArguments(t *testing.T) {
	c := newConn(t)
	good := func(us int64) []string {
		return append(common(us, 0, "1", "permits", limit("10", "3")...), requests(1, "-1", "1")...)
	}
	edit := func(i int, v string) func([]string) []string {
		return func(a []string) []string { a[i] = v; return a }
	}
	reserveCases := []struct {
		name, code string
		edit       func([]string) []string
	}{
		{"rate 0", "PACER_ARG", edit(8, "0")},
		{"rate -1", "PACER_ARG", edit(8, "-1")},
		{"rate inf", "PACER_ARG", edit(8, "inf")},
		{"rate x", "PACER_ARG", edit(8, "x")},
		{"burst 0", "PACER_ARG", edit(9, "0")},
		{"k 2, one band", "PACER_ARG", edit(4, "2")},
		{"k 0", "PACER_ARG", edit(4, "0")},
		{"k 1, two bands", "PACER_ARG", func(a []string) []string {
			return slices.Insert(a, 10, "more", "1", "b", "5", "1")
		}},
		{"kind x", "PACER_ARG", edit(7, "x")},
		{"name ~x", "PACER_ARG", edit(5, "~x")},
		{"window N 0", "PACER_ARG", func(a []string) []string { a[7], a[8], a[9] = "w", "0", "1000:0"; return a }},
		{"window length 0", "PACER_ARG", func(a []string) []string { a[7], a[8], a[9] = "w", "3", "0:0"; return a }},
		{"window without origin", "PACER_ARG", func(a []string) []string { a[7], a[8], a[9] = "w", "3", "1000"; return a }},
		{"m 2, one request", "PACER_ARG", edit(11, "2")},
		{"m x", "PACER_ARG", edit(11, "x")},
		{"max wait x", "PACER_ARG", edit(12, "x")},
		{"cost -1", "PACER_ARG", edit(13, "-1")},
		{"cost nan", "PACER_ARG", edit(13, "nan")},
		{"cost inf", "PACER_ARG", edit(13, "inf")},
		{"cost above the burst", "PACER_EXCEEDS", edit(13, "4")},
		{"format f3", "PACER_ARG", edit(2, "f3 1")},
		{"format without share", "PACER_ARG", edit(2, "f1")},
		{"share 0", "PACER_ARG", edit(2, "0")},
		{"share of 2 with no rank held", "PACER_ARG", edit(2, "2")},
	}
	c.reserve("s", good(0)...)
	for _, k := range []string{"absent", "s"} {
		before := c.get(c.key(k, ""))
		for _, tc := range reserveCases {
			_, err := c.eval("RESERVE", c.reserveKeys(k), tc.edit(good(1))...)
			if code(err) != tc.code {
				t.Errorf("Reserve(%s) on %s: %v, want %s", tc.name, k, err, tc.code)
			}
		}
		if got := c.get(c.key(k, "")); got != before {
			t.Errorf("bad Reserves on %s wrote %q over %q", k, got, before)
		}
		lim := common(1, 0, "1", "permits", limit("10", "3")...)
		for _, tc := range []struct {
			name, script, code string
			args               []string
		}{
			{"Adjust refund", "ADJUST", "PACER_ARG", append(slices.Clone(lim), "refund", at(0), "0", "1", "1")},
			{"Adjust slot x", "ADJUST", "PACER_ARG", append(slices.Clone(lim), "cancel", "x", "0", "1", "1")},
			{"Adjust id with a space", "ADJUST", "PACER_ARG", append(slices.Clone(lim), "cancel", at(0), "0", "1 2", "1")},
			{"Adjust settle without the actual cost", "ADJUST", "PACER_ARG", append(slices.Clone(lim), "settle", at(0), "0", "1", "1")},
			{"Pause 0", "PAUSE", "PACER_ARG", append(slices.Clone(lim), "0")},
			{"Pause -5", "PAUSE", "PACER_ARG", append(slices.Clone(lim), "-5")},
			{"Peek cost -1", "PEEK", "PACER_ARG", append(slices.Clone(lim), "-1")},
			{"Peek cost above the burst", "PEEK", "PACER_EXCEEDS", append(slices.Clone(lim), "4")},
			{"Peek rate 0", "PEEK", "PACER_ARG", append(common(1, 0, "1", "permits", limit("0", "3")...), "1")},
		} {
			keys := c.reserveKeys(k)[:2]
			if tc.script == "ADJUST" {
				keys = append(keys, c.key(k, ":done"))
			}
			if _, err := c.eval(tc.script, keys, tc.args...); code(err) != tc.code {
				t.Errorf("%s on %s: %v, want %s", tc.name, k, err, tc.code)
			}
		}
		if got := c.get(c.key(k, "")); got != before {
			t.Errorf("bad calls on %s wrote %q over %q", k, got, before)
		}
		if got := c.get(c.key(k, ":done")); got != "" {
			t.Errorf("bad Adjusts on %s wrote %q", k, got)
		}
	}
	// A malformed stored limit (docs/protocol.md: The stored limit).
	for _, stored := range []string{"enforce 1 permits permits b 0 1", "bogus 1 permits permits b 5 1", "enforce 2 permits permits b 5 1"} {
		c.do("SET", c.key("cfg", ":limit"), stored)
		if _, err := c.eval("RESERVE", c.reserveKeys("cfg"), good(1)...); code(err) != "PACER_CONFIG" {
			t.Errorf("Reserve under the stored limit %q: %v, want PACER_CONFIG", stored, err)
		}
	}
	if got := c.get(c.key("cfg", "")); got != "" {
		t.Errorf("Reserve under a malformed stored limit wrote %q", got)
	}
}

// TestConformanceNaN: NaN and infinities are malformed wherever a number
// is, as docs/protocol.md's Errors says, and so are a fractional burst, a
// unit index outside ARGV[4]'s units, a negative maximum wait other than
// -1 and a pause that is not a positive whole number of µs: PACER_ARG,
// nothing written. (NaN passed every check once: a <= 0 and b < 1 are
// false for it, and a NaN window N granted every request. reserve's Go
// code refuses these before it calls; another client could send them.)
func TestConformanceNaN(t *testing.T) {
	c := newConn(t)
	for i, tc := range []struct {
		bands   []string
		maxWait string
	}{
		{limit("nan", "3"), "-1"},
		{limit("NaN", "3"), "-1"},
		{limit("10", "nan"), "-1"},
		{limit("10", "inf"), "-1"},
		{limit("10", "1.5"), "-1"}, // a burst is a whole number of units
		{[]string{"1", "permits", "1", "w", "nan", "1000000:0"}, "-1"},
		{[]string{"1", "permits", "1", "w", "inf", "1000000:0"}, "-1"},
		{[]string{"1", "permits", "2", "b", "10", "3"}, "-1"}, // a unit index beyond ARGV[4]'s units
		{[]string{"1", "permits", "0", "b", "10", "3"}, "-1"},
		{limit("10", "3"), "nan"}, // a maximum wait that is not a number >= 0 (or -1)
		{limit("10", "3"), "inf"},
		{limit("10", "3"), "-2"},
	} {
		k := fmt.Sprintf("nan:%d", i)
		_, err := c.eval("RESERVE", c.reserveKeys(k), append(common(0, 0, "1", "permits", tc.bands...), requests(1, tc.maxWait, "1")...)...)
		if code(err) != "PACER_ARG" {
			t.Errorf("Reserve with bands %q, max wait %q: %v, want PACER_ARG", tc.bands, tc.maxWait, err)
		}
		if got := c.get(c.key(k, "")); got != "" {
			t.Errorf("Reserve with bands %q, max wait %q wrote %q", tc.bands, tc.maxWait, got)
		}
	}
	// The other scripts' numbers: NaN and infinities are malformed there
	// too.
	lim := common(0, 0, "1", "permits", limit("10", "3")...)
	fairKeys := func(k string) []string {
		keys := []string{c.key(k, ""), c.key(k, ":limit"), c.key(k, ":shadow")}
		for _, s := range []string{":fair", ":fw:u", ":fw:n", ":fw:b", ":fp:u", ":fp:n", ":fp:b", ":weights", ":fx"} {
			keys = append(keys, c.key(k, s))
		}
		return keys
	}
	for _, tc := range []struct {
		script string
		keys   func(k string) []string
		args   []string
	}{
		{"ADJUST", func(k string) []string { return []string{c.key(k, ""), c.key(k, ":limit"), c.key(k, ":done")} }, []string{"cancel", "nan", "0", "1", "1"}},
		{"ADJUST", func(k string) []string { return []string{c.key(k, ""), c.key(k, ":limit"), c.key(k, ":done")} }, []string{"cancel", at(0), "inf", "1", "1"}},
		{"CLAIM", func(k string) []string { return []string{c.key(k, ""), c.key(k, ":limit"), c.key(k, ":h:a")} }, []string{"nan", "1", "1000", "0", "1"}},
		{"CLAIM", func(k string) []string { return []string{c.key(k, ""), c.key(k, ":limit"), c.key(k, ":h:a")} }, []string{"1000", "1", "inf", "0", "1"}},
		{"CLAIM", func(k string) []string { return []string{c.key(k, ""), c.key(k, ":limit"), c.key(k, ":h:a")} }, []string{"1000", "1", "1000", "nan", "1"}},
		{"HOLD", func(k string) []string { return []string{c.key(k, ""), c.key(k, ":limit"), c.key(k, ":h:a")} }, []string{"nan", "0", "1", "1"}},
		{"HOLD", func(k string) []string { return []string{c.key(k, ""), c.key(k, ":limit"), c.key(k, ":h:a")} }, []string{"1000", "inf", "1", "1"}},
		{"LEASE", func(k string) []string { return []string{c.key(k, ""), c.key(k, ":limit")} }, []string{"inf", "1"}},
		{"FAIR", fairKeys, []string{"2 1 nan 0 1 0 1 0 w", "acme", "", "1", "-1", "1"}},
		{"FAIR", fairKeys, []string{"2 1 0 nan 1 0 1 0 w", "acme", "", "1", "-1", "1"}},
	} {
		k := fmt.Sprintf("nanop:%s:%s", tc.script, strings.Join(tc.args, ","))
		_, err := c.eval(tc.script, tc.keys(k), append(slices.Clone(lim), tc.args...)...)
		if code(err) != "PACER_ARG" {
			t.Errorf("%s %q: %v, want PACER_ARG", tc.script, tc.args, err)
		}
		if got := c.get(c.key(k, "")); got != "" {
			t.Errorf("%s %q wrote %q", tc.script, tc.args, got)
		}
	}
	// A pause is a positive whole number of µs.
	for _, d := range []string{"nan", "inf", "0.5", "0", "-3"} {
		k := "nanpause:" + d
		_, err := c.eval("PAUSE", c.reserveKeys(k)[:2], append(common(0, 0, "1", "permits", limit("10", "3")...), d)...)
		if code(err) != "PACER_ARG" {
			t.Errorf("Pause %q: %v, want PACER_ARG", d, err)
		}
		if got := c.get(c.key(k, "")); got != "" {
			t.Errorf("Pause %q wrote %q", d, got)
		}
	}
}

// TestConformanceWrongType: a key of another type, or a string that is no
// state of a format this release reads (a future format starts with a
// non-digit), is refused by every script with PACER_WRONGTYPE and left as
// it is (docs/protocol.md: Errors, Versions).
func TestConformanceWrongType(t *testing.T) {
	c := newConn(t)
	lim := common(0, 0, "1", "permits", limit("10", "3")...)
	calls := func(k string) map[string][]any {
		rk := c.reserveKeys(k)
		fair := []string{rk[0], rk[1], rk[2]}
		for _, s := range []string{":fair", ":fw:u", ":fw:n", ":fw:b", ":fp:u", ":fp:n", ":fp:b", ":weights", ":fx"} {
			fair = append(fair, c.key(k, s))
		}
		return map[string][]any{
			"Reserve": {"RESERVE", rk, append(slices.Clone(lim), requests(1, "-1", "1")...)},
			"Fair":    {"FAIR", fair, append(slices.Clone(lim), append([]string{"2 1 0 0 1 0 1 0 w", "acme"}, requests(1, "-1", "1")...)...)},
			"Adjust":  {"ADJUST", []string{rk[0], rk[1], c.key(k, ":done")}, append(slices.Clone(lim), "cancel", at(0), "0", "1", "1")},
			"Pause":   {"PAUSE", rk[:2], append(slices.Clone(lim), "1000")},
			"Peek":    {"PEEK", rk[:2], append(slices.Clone(lim), "1")},
			"Resume":  {"RESUME", rk[:2], common(0, 0, "1", "permits", "0")},
			"Rewrite": {"REWRITE", rk[:2], common(0, 0, "f1 1", "permits", "0")},
			"Admin":   {"ADMIN", []string{rk[0], rk[1], rk[2], c.key(k, ":history"), c.key(k, ":weights")}, []string{"set", "enforce 1 permits permits b 5 1", "me", "test", "50", ""}},
		}
	}
	check := func(k, what, keyType string) {
		t.Helper()
		all := calls(k)
		for _, name := range slices.Sorted(maps.Keys(all)) { // in order: the cases' file records them so
			call := all[name]
			_, err := c.eval(call[0].(string), call[1].([]string), call[2].([]string)...)
			if code(err) != "PACER_WRONGTYPE" {
				t.Errorf("%s on %s: %v, want PACER_WRONGTYPE", name, what, err)
			}
		}
		typ, _ := c.do("TYPE", c.key(k, ""))
		if typ != keyType {
			t.Errorf("%s: TYPE %v after the calls, want %s", what, typ, keyType)
		}
	}
	c.do("HSET", c.key("hash", ""), "a", "b")
	check("hash", "a hash", "hash")
	for i, s := range []string{"hello", "F3 1700000000000000 7000 5 0 2000000000 2000000000", "2 1700000000000000 7000 5 0 x", "1 x"} {
		k := fmt.Sprintf("str:%d", i)
		c.do("SET", c.key(k, ""), s)
		check(k, fmt.Sprintf("%q", s), "string")
		if got, _ := c.do("GET", c.key(k, "")); got != s {
			t.Errorf("%q became %v", s, got)
		}
	}
	// The stored limit's key and Adjust's memory.
	c.do("HSET", c.key("hl", ":limit"), "a", "b")
	if _, err := c.eval("RESERVE", c.reserveKeys("hl"), append(slices.Clone(lim), requests(1, "-1", "1")...)...); code(err) != "PACER_WRONGTYPE" {
		t.Errorf("Reserve with a hash at :limit: %v, want PACER_WRONGTYPE", err)
	}
	c.do("RPUSH", c.key("hd", ":done"), "x")
	if _, err := c.eval("ADJUST", []string{c.key("hd", ""), c.key("hd", ":limit"), c.key("hd", ":done")}, append(slices.Clone(lim), "cancel", at(0), "0", "1", "1")...); code(err) != "PACER_WRONGTYPE" {
		t.Errorf("Adjust with a list at :done: %v, want PACER_WRONGTYPE", err)
	}
}

// TestConformanceHeartbeat: the 11-entry reply, the member recorded in the
// fleet's keys, the format each member is told and recorded as writing,
// and leave (docs/protocol.md: Heartbeat, Keys, Versions).
// TestConformanceHeartbeatOrder: a heartbeat sent before its Limiter
// last changed mode (docs/protocol.md, Heartbeat: its since_ms older than
// the one recorded for the other mode) changes nothing and is answered
// {now_ms}: Redis may run heartbeats queued while it stalled in any order.
func TestConformanceHeartbeatOrder(t *testing.T) {
	c := newConn(t)
	fleet := []string{c.key("limiters", "")}
	for _, s := range fleetSuffixes {
		fleet = append(fleet, c.key("limiters", s))
	}
	beat := func(mode, since string) []any {
		v, err := c.eval("HEARTBEAT", fleet, "w1", mode, since+" 0 0", "2000", "60000", "30000", "180000", "", "")
		if err != nil {
			t.Fatalf("Heartbeat %s %s: %v", mode, since, err)
		}
		a, _ := v.([]any)
		return a
	}
	rec := func() string { v, _ := c.do("HGET", fleet[1], "w1"); s, _ := v.(string); return s }
	for i, step := range []struct {
		mode, since string
		entries     int
		record      string
	}{
		{"redis", "1000", 11, "redis 1000 0 0"},
		{"local", "2000", 11, "local 2000 0 0"},
		{"redis", "1000", 1, "local 2000 0 0"}, // sent before the switch, run after
		{"local", "2000", 11, "local 2000 0 0"},
		{"redis", "3000", 11, "redis 3000 0 0"}, // back on Redis
		{"redis", "3000", 11, "redis 3000 0 0"},
	} {
		if got := beat(step.mode, step.since); len(got) != step.entries || rec() != step.record {
			t.Errorf("step %d: Heartbeat %s since %s = %s, record %q; want %d entries, record %q", i, step.mode, step.since, show(got), rec(), step.entries, step.record)
		}
	}
}

func TestConformanceHeartbeat(t *testing.T) {
	c := newConn(t)
	fleet := []string{c.key("limiters", "")}
	for _, s := range fleetSuffixes {
		fleet = append(fleet, c.key("limiters", s))
	}
	beat := func(id, mode, deadline string, more ...string) ([]any, error) {
		// suspect_ms 30000: "before" tells the last change of the fleet's
		// size for 60 s, longer than the test takes.
		args := append([]string{id, mode, "1700000000000 0 0", "2000", "60000", "30000", "180000", "", deadline}, more...)
		v, err := c.eval("HEARTBEAT", fleet, args...)
		a, _ := v.([]any)
		return a, err
	}
	now, _ := c.do("TIME")
	nowMS := func() int64 { s, _ := strconv.ParseInt(now.([]any)[0].(string), 10, 64); return s * 1000 }()
	c.volatile(nowMS, "{ms}")
	r, err := beat("w1", "redis", "", "api", strconv.FormatInt(nowMS, 10)+" 1 permits permits b 10 2")
	if err != nil || len(r) != 11 {
		t.Fatalf("Heartbeat = %s, %v; want 11 entries", show(r), err)
	}
	if want := "[*, 1, 0, 0, 1, [], [], 0, 0, [], \"1\"]"; !matches(r, mustReply(t, want)) {
		t.Errorf("Heartbeat = %s, want %s", show(r), want)
	}
	r, _ = beat("w2", "local", "")
	if want := "[*, 2, 0, 1, 2, [], [], 0, 1, [], \"1\"]"; !matches(r, mustReply(t, want)) {
		t.Errorf("second member's Heartbeat = %s, want %s", show(r), want)
	}
	r, _ = beat("w1", "redis", "")
	if want := "[*, 1, 1, 0, 2, [1], [], 0, 1, [], \"1\"]"; !matches(r, mustReply(t, want)) {
		t.Errorf("Heartbeat beside a member pacing locally = %s, want %s", show(r), want)
	}
	for _, q := range []struct {
		cmd  []any
		want string
	}{
		{[]any{"HGET", fleet[1], "w1"}, `"redis 1700000000000 0 0"`},
		{[]any{"HGET", fleet[1], "w2"}, `"local 1700000000000 0 0"`},
		{[]any{"ZRANGEBYSCORE", fleet[3], "1", "1"}, `["w2"]`},
		{[]any{"HGET", fleet[7], "w1"}, `"1"`},
		{[]any{"ZCARD", fleet[0]}, `2`},
		{[]any{"HGET", fleet[2], "api"}, fmt.Sprintf(`"%d 1 permits permits b 10 2"`, nowMS)},
	} {
		got, err := c.do(q.cmd...)
		if err != nil || !matches(got, mustReply(t, q.want)) {
			t.Errorf("%v = %s, %v; want %s", q.cmd, show(got), err, q.want)
		}
	}
	for _, k := range []string{fleet[0], fleet[1], fleet[3], fleet[7]} {
		// Renewed to hold_ms + hold_ms / 4 at least every hold_ms / 4:
		// the records outlive the last heartbeat by hold_ms at least.
		if p, _ := c.do("PTTL", k); p.(int64) <= 60000-1000 || p.(int64) > 75000 {
			t.Errorf("PTTL %s = %v, want in (hold_ms, hold_ms * 5/4]", k, p)
		}
	}
	c.do("SET", fleet[6], "2")
	if r, _ = beat("w1", "redis", ""); show(r[10]) != `"2"` {
		t.Errorf("Heartbeat with the format set to 2 tells %s", show(r[10]))
	}
	if got, _ := c.do("HGET", fleet[7], "w1"); got != "2" {
		t.Errorf("writes[w1] = %v, want 2", got)
	}
	// A deadline passed: refused, nothing changed.
	score, _ := c.do("ZSCORE", fleet[0], "w2")
	if _, err := beat("w2", "redis", "1"); code(err) != "PACER_STALE" {
		t.Errorf("Heartbeat after its deadline: %v, want PACER_STALE", err)
	}
	if s, _ := c.do("ZSCORE", fleet[0], "w2"); s != score {
		t.Errorf("a stale Heartbeat moved w2's score from %v to %v", score, s)
	}
	if r, err := beat("w2", "leave", ""); err != nil || len(r) != 1 {
		t.Errorf("leave = %s, %v; want [now_ms]", show(r), err)
	}
	for _, k := range []string{fleet[1], fleet[7]} {
		if got, _ := c.do("HEXISTS", k, "w2"); got != int64(0) {
			t.Errorf("after leave, %s still has w2", k)
		}
	}
	if got, _ := c.do("ZSCORE", fleet[0], "w2"); got != nil {
		t.Errorf("after leave, the fleet still has w2 (%v)", got)
	}
}

// mustReply parses a reply as docs/protocol.md writes it.
func mustReply(t *testing.T, s string) any {
	t.Helper()
	v, err := parseReply(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestStateGrammar: the parser written from "The state" takes the
// page's examples and refuses what the grammar does not allow.
func TestStateGrammar(t *testing.T) {
	for _, s := range []string{
		"1700000000000000 7000 5 0 2000000000 2000000000",
		"1700000000200000 8000 5 3000000000 permits 3000000000 800000000 ~p 5 800000000",
		"1700000000500000 7700 6 c0 permits 1500000000 1500000000 ~s 5:6 2200000000",
		"1700000000000000 6402000 3 0 rps 2000000250 2100000250 tps 2100000250 2100000250 daily w19675 3",
		"1700000000000000 2000 1 0 permits -50000000.500 0 ~p 0 0 ~l 250000000 2",
		"1 1700000000000000 6402000000000 3 0.000 0 rps 2000000250.000 2100000250.000 tps 2100000250.000 2100000250.000 daily 19675 3",
		"1 1700000000000000 7000000000 5 0.000 1 permits 2000000000.000 2000000000.000 ~p 5 0.000",
	} {
		if _, err := parseState(s); err != nil {
			t.Errorf("parseState: %v", err)
		}
	}
	for _, s := range []string{
		"", "1", "F3 1700000000000000 7000 5 0 2000000000 2000000000",
		"1700000000000000 2000 1 0 nan nan",
		"1700000000000000 2000 1 0 -nan -nan",
		"1700000000000000 2000 1 0 2000000000.5 2000000000",
		"1700000000000000  2000 1 0 0 0",
		"1700000000000000 2000 1 0 permits 0",
		"1700000000000000 2000 1 0 ~q 1 2",
		"1 1700000000000000 7000000000 5 0 0 permits 2000000000.000 2000000000.000",
		"1 1700000000000000 7000000000 5 0.000 2 permits 2000000000.000 2000000000.000",
	} {
		if st, err := parseState(s); err == nil {
			t.Errorf("parseState(%q) = %+v, want an error", s, st)
		}
	}
	if st, err := parseState("1700000000000000 2000 1 c0 0 0"); err != nil || !st.stored {
		t.Errorf("parseState of a state with the flag c = %+v, %v", st, err)
	}
}

// TestConformanceCalendar: a calendar window (kind "c") takes its windows
// from the table ARGV[3] carries ("c<spec>=<i0>:<b0>:<len>*<count>,..."),
// numbered by the period's ordinal: here the days of America/Los_Angeles
// around 2026-03-08, a day of 23 hours. Calls queued past the day's end
// land at the next local midnight, in window 20521; past the table's end
// they are refused as a queue too long (-1); a band without its table, or a table that does
// not reach now, refuses the call and changes nothing; a stored limit's
// calendar band needs its table too (docs/protocol.md: Common arguments,
// Reserve).
func TestConformanceCalendar(t *testing.T) {
	c := newConn(t)
	const table = "cday:America/Los_Angeles=20519:1772870400000000:86400000000*1,82800000000*1,86400000000*2 "
	band := []string{"1", "daily", "1", "c", "3", "day:America/Los_Angeles"}
	args := func(now string, cal string, m int) []string {
		return append(append([]string{now, "0", cal + "1", "requests"}, band...), requests(m, "-1", "1")...)
	}
	// 2026-03-08 23:59:59.5 in Los Angeles; the next day starts 0.5 s later.
	r := c.reserve("cal", args("1773039599500000", table, 5)...)
	if !slices.Equal(r.waits, []int64{0, 0, 0, 500_000_000, 500_000_000}) || !slices.Equal(r.bands, []string{"~", "~", "~", "daily", "daily"}) {
		t.Fatalf("5 requests at 23:59:59.5: waits %v bands %q, want 3 now and 2 at midnight, set by daily", r.waits, r.bands)
	}
	st := c.parse(r.state)
	if d, _ := st.band("daily"); !d.window || d.w != 20521 || d.u != 2 {
		t.Errorf("state %q: want daily w20521 2 (the day after, its ordinal)", r.state)
	}
	before := c.get(c.key("cal", ""))
	// Without the table, or with one that starts after now: refused.
	for _, tc := range []struct{ now, cal, code string }{
		{"1773039599500000", "", "PACER_CALENDAR"},
		{"1773039599500000", "cday:UTC=20519:1772870400000000:86400000000*4 ", "PACER_CALENDAR"},
		{"1772870399999999", table, "PACER_ARG"},
		{"1773039599500000", "cday:America/Los_Angeles=20519:1772870400000000:0*1 ", "PACER_ARG"},
		{"1773039599500000", "cday:America/Los_Angeles=x ", "PACER_ARG"},
	} {
		_, err := c.eval("RESERVE", c.reserveKeys("cal"), args(tc.now, tc.cal, 1)...)
		if err == nil || !strings.HasPrefix(err.Error(), tc.code+" ") {
			t.Errorf("now %s tables %q: error %v, want %s", tc.now, tc.cal, err, tc.code)
		}
		if got := c.get(c.key("cal", "")); got != before {
			t.Errorf("a refused call changed the state: %q, was %q", got, before)
		}
	}
	// On 2026-03-10 (window 20522, the table's last: its last boundary
	// ends it): three now, and the fourth would go past the table:
	// refused as a queue too long (-1).
	r = c.reserve("cal2", args("1773130000000000", table, 4)...)
	if !slices.Equal(r.seqs, []int64{1, 2, 3, -1}) || !slices.Equal(r.waits, []int64{0, 0, 0, 0}) {
		t.Errorf("4 requests on the table's last day: waits %v seqs %v, want 3 now, the last -1", r.waits, r.seqs)
	}
	// A stored limit's calendar band: refused without its table, enforced
	// with it.
	if _, err := c.do("SET", c.key("cal3", ":limit"), "enforce 1 daily requests c 1 day:America/Los_Angeles"); err != nil {
		t.Fatal(err)
	}
	bucket := append([]string{"1773039599500000", "0", "1", "requests"}, "1", "rps", "1", "b", "100", "100")
	if _, err := c.eval("RESERVE", c.reserveKeys("cal3"), append(bucket, requests(1, "-1", "1")...)...); err == nil || !strings.HasPrefix(err.Error(), "PACER_CALENDAR day:America/Los_Angeles ") {
		t.Errorf("a stored calendar band without its table: %v, want PACER_CALENDAR day:America/Los_Angeles", err)
	}
	bucket[2] = table + "1"
	r = c.reserve("cal3", append(bucket, requests(2, "-1", "1")...)...)
	if !slices.Equal(r.waits, []int64{0, 500_000_000}) || r.bands[1] != "daily" {
		t.Errorf("a stored calendar band of 1 a day: waits %v bands %q, want 0 and the next midnight, set by daily", r.waits, r.bands)
	}
}

// TestConformanceFairGroups: the fair script's batches of several tenants
// in one call (fair.lua: a spec ending in the batch's length "<n>", another
// pair after it). A good call books each batch as calls of their own would;
// a bad pair or a bad request of any batch refuses the call, PACER_ARG,
// before anything is written, the first batch's state included.
func TestConformanceFairGroups(t *testing.T) {
	c := newConn(t)
	lim := common(0, 0, "1", "permits", limit("1000", "3")...)
	keys := func(k string) []string {
		rk := c.reserveKeys(k)
		out := []string{rk[0], rk[1], rk[2]}
		for _, s := range []string{":fair", ":fw:u", ":fw:n", ":fw:b", ":fp:u", ":fp:n", ":fp:b", ":weights", ":fx"} {
			out = append(out, c.key(k, s))
		}
		return out
	}
	// Two tenants, one request each, in one call: both booked, a slot
	// interval apart (the burst of 3 lets both go now).
	got, err := c.eval("FAIR", keys("good"), append(slices.Clone(lim), "2 1 0 0 1 0 1 0 w 1", "a", "2 1 0 0 1 0 1 0 w", "b", "", "2", "-1", "1", "-1", "1")...)
	if err != nil {
		t.Fatal(err)
	}
	reply := got.([]any)
	if reply[3] != int64(1) || reply[5] != int64(2) {
		t.Errorf("two tenants' batches: %v, want seq 1 and 2", reply)
	}
	for i, args := range [][]string{
		{"2 1 0 0 1 0 1 0 w 1", "a", "2 1 0 0 1 0 1 0 w", "b", "", "2", "-1", "1", "-1", "x"},  // a bad cost in the second batch
		{"2 1 0 0 1 0 1 0 w 1", "a", "2 1 0 0 1 0 1 0 w", "b", "", "2", "-1", "1", "nan", "1"}, // a bad max wait there
		{"2 1 0 0 1 0 1 0 w 1", "a", "2 1 0 0 1 0 1 0 w", "b", "", "2", "-1", "1", "-1", "9"},  // a cost above the burst
		{"2 1 0 0 1 0 1 0 w 2", "a", "2 1 0 0 1 0 1 0 w", "b", "", "2", "-1", "1", "-1", "1"},  // no request left for b
		{"2 1 0 0 1 0 1 0 w 0", "a", "2 1 0 0 1 0 1 0 w", "b", "", "2", "-1", "1", "-1", "1"},  // an empty batch
		{"2 1 0 0 1 0 1 0 w 1", "a", "2 0 0 0 1 0 1 0 w", "b", "", "2", "-1", "1", "-1", "1"},  // a bad weight in the second pair
		{"2 1 0 0 1 0 1 0 w 1", "a", "2 1 0 0 1 0 1 0 w", "b", "", "3", "-1", "1", "-1", "1"},  // m beyond the requests
	} {
		k := fmt.Sprintf("badgroups:%d", i)
		_, err := c.eval("FAIR", keys(k), append(slices.Clone(lim), args...)...)
		if want := "PACER_ARG"; i == 2 {
			if code(err) != "PACER_EXCEEDS" {
				t.Errorf("case %d: %v, want PACER_EXCEEDS", i, err)
			}
		} else if code(err) != want {
			t.Errorf("case %d: %v, want %s", i, err, want)
		}
		for _, key := range keys(k) {
			if n, _ := c.do("EXISTS", key); n != int64(0) {
				t.Errorf("case %d wrote %s", i, key)
			}
		}
	}
}

// fleetSuffixes are the fleet's keys after the first (docs/protocol.md,
// Heartbeat: KEYS[2...11]).
var fleetSuffixes = []string{":info", ":policies", ":ids", ":checked", ":policies:at", ":format", ":writes", ":x:w", ":x:local", ":x:holes"}
