package lua_test

import (
	"encoding/hex"
	"fmt"
	"maps"
	"math"
	"math/big"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// t0 is the client clock's now of every check (docs/protocol.md's
// examples' too): Unix µs.
const t0 = int64(1700000000000000)

// at returns t0 + us, Unix µs, as a decimal string (a slot's µs).
func at(us int64) string { return strconv.FormatInt(t0+us, 10) }

// clock returns ARGV[2]'s client clock, "t<now_us>:<now_ns> ".
func clock(nowUS int64, ns int) string {
	return "t" + strconv.FormatInt(nowUS, 10) + ":" + strconv.Itoa(ns) + " "
}

// common returns docs/protocol.md's "Common arguments" on the client clock
// t0 + us, now_ns: ARGV[1] "" (no deadline: a client clock ignores one),
// ARGV[2] the clock then env (the format, a lost key's horizon, calendar
// tables, then the share: "1", "f2 1", ...) and ARGV[3] the policy.
func common(us int64, ns int, env, policy string) []string {
	return []string{"", clock(t0+us, ns) + env, policy}
}

// limit returns a Limit's policy (ARGV[3]): "L", then its rate and burst
// as little-endian doubles.
func limit(rate, burst float64) string { return limitArg(rate, burst) }

// threeBands is "Common arguments"' policy of three bands: 2 requests per
// second (burst 2), 1000 tokens per second (burst 6000), 3 requests per
// UTC day.
const threeBands = "2 requests tokens 3 rps 1 b 2 2 tps 2 b 1000 6000 daily 1 w 3 86400000000:0"

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

// fairKeys are Fair's KEYS ("Fair").
func (c *conn) fairKeys(k string) []string {
	keys := c.reserveKeys(k)
	for _, s := range []string{":fair", ":fw:u", ":fw:n", ":fw:b", ":fp:u", ":fp:n", ":fp:b", ":weights", ":fx"} {
		keys = append(keys, c.key(k, s))
	}
	return keys
}

// reserve runs Reserve on key k with args (the common ones, then its own)
// and decodes its reply.
func (c *conn) reserve(k string, args ...string) reply {
	c.t.Helper()
	return c.decode(c.mustEval("RESERVE", c.reserveKeys(k), args...))
}

// decode decodes Reserve's (or Fair's) reply, one string of bytes, and
// checks its shape: now_us, now_ns, m pairs, the state, the stored limit,
// the binding bands (one word per request). It parses the state.
func (c *conn) decode(v any) reply {
	c.t.Helper()
	if _, ok := v.(string); !ok {
		c.t.Fatalf("docs/protocol.md, Reserve: reply %s: want one string of bytes", show(v))
	}
	d := decodeReserve(c.t, v).(reserveReply)
	r := reply{nowUS: d.nowUS, nowNS: d.nowNS, state: d.state, stored: d.stored, bands: strings.Fields(d.bys)}
	for i := 0; i < len(d.grants); i += 2 {
		r.waits = append(r.waits, d.grants[i])
		r.seqs = append(r.seqs, d.grants[i+1])
	}
	if len(r.bands) != len(r.waits) {
		c.t.Fatalf("docs/protocol.md, Reserve: reply %s: %d binding bands for %d requests", show(v), len(r.bands), len(r.waits))
	}
	if r.state != "" {
		c.parse(r.state)
	}
	return r
}

// requests returns Reserve's own arguments: no floor, then m requests of
// max_wait_us and costs, little-endian doubles.
func requests(m int, maxWait float64, costs ...float64) []string {
	var v []float64
	for range m {
		v = append(append(v, maxWait), costs...)
	}
	return []string{"", doubles(v...)}
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
					env    string
				}{{1, "f1 1"}, {2, "f2 1"}, {3, "1"}} { // in order: the cases' file records them so
					format, env := fs.format, fs.env
					n++
					key := fmt.Sprintf("spacing:%d", n)
					what := fmt.Sprintf("Reserve(rate %s, burst %d, now_ns %d, format %d)", rate, burst, ns, format)
					fr, _ := strconv.ParseFloat(rate, 64)
					args := append(common(0, ns, env, limit(fr, float64(burst))), requests(m, -1, 1)...)
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
						t.Errorf("%s: GET = %s, want the state replied %s", what, show(got), show(r.state))
					}
					b, ok := st.band("permits")
					r0, _ := new(big.Rat).SetString(rate)
					fr, _ = r0.Float64()
					z := float64(m-burst)*1e9/fr + float64(ns) // exact to far below the 5e-4 of the format
					if st.format != format || st.t != t0 || st.seq != m || st.pause != 0 || st.stored || !ok ||
						math.Abs(b.z-z) > 6e-4 || b.e != float64(int64(ns)+r.waits[m-1]) {
						t.Errorf("%s: state %s: want format %d, t %d, s %d, p 0, z %.3f, e %d", what, show(r.state), format, t0, m, z, int64(ns)+r.waits[m-1])
					}
					full := z + float64(burst)*1e9/fr // ns after t
					x := float64(st.x) * 1e6
					if format == 1 {
						x = float64(st.x)
					}
					if x < full+1e9 || x > full+2e9+1e6 {
						t.Errorf("%s: state %s: expiry %v ns after t, want 1 to 2 s after the bucket is full (%v)", what, show(r.state), x, full)
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

// TestConformanceFormats: a key written in formats 1, 2 and 3 in turn
// replies exactly as one written in format 3 throughout: each format is
// read, and written as ARGV[2] asks (docs/protocol.md: The state,
// Versions).
func TestConformanceFormats(t *testing.T) {
	c := newConn(t)
	for i := range int64(12) {
		now := i * 37_000
		env, want := []string{"f1 1", "f2 1", "1"}[i%3], int(1+i%3)
		costs := []float64{1, float64(100 * i)}
		a := c.reserve("twin:a", append(common(now, 0, "1", threeBands), requests(1, -1, costs...)...)...)
		b := c.reserve("twin:b", append(common(now, 0, env, threeBands), requests(1, -1, costs...)...)...)
		if !slices.Equal(a.waits, b.waits) || !slices.Equal(a.seqs, b.seqs) {
			t.Fatalf("step %d: format 3 throughout: %v %v; formats in turn: %v %v", i, a.waits, a.seqs, b.waits, b.seqs)
		}
		sa, sb := c.parse(a.state), c.parse(b.state)
		if sb.format != want || sa.format != 3 {
			t.Errorf("step %d: formats %d and %d, want 3 and %d", i, sa.format, sb.format, want)
		}
		if !statesClose(sa, sb) {
			t.Fatalf("step %d: %s and %s differ", i, show(a.state), show(b.state))
		}
	}
	// Rewrite turns format 3 into 1, 2 and back, changing nothing it means.
	for i, env := range []string{"f1 1", "f2 1", "1"} {
		v := c.mustEval("REWRITE", c.reserveKeys("twin:a")[:2], common(444_000, 0, env, "")...)
		s, _ := v.(string)
		if st := c.parse(s); st.format != i+1 || c.get(c.key("twin:a", "")) != s {
			t.Errorf("Rewrite with %q: %s", env, show(s))
		}
	}
	a := c.reserve("twin:a", append(common(445_000, 0, "1", threeBands), requests(1, -1, 1, 5)...)...)
	b := c.reserve("twin:b", append(common(445_000, 0, "1", threeBands), requests(1, -1, 1, 5)...)...)
	if !slices.Equal(a.waits, b.waits) || a.state != b.state {
		t.Errorf("after Rewrite: %v %s, want %v %s", a.waits, show(a.state), b.waits, show(b.state))
	}
}

// statesClose reports whether two states say the same, their times
// within 1e-3 ns (format 1 and 2 write them to a thousandth of a ns,
// format 3's general form too, its Limit forms exactly); their formats may
// differ (x is in ns in format 1, ms in the others).
func statesClose(a, b state) bool {
	xa, xb := a.x, b.x
	if a.format == 1 {
		xa /= 1_000_000
	}
	if b.format == 1 {
		xb /= 1_000_000
	}
	if a.t != b.t || xa != xb || a.seq != b.seq || a.stored != b.stored || math.Abs(a.pause-b.pause) > 1e-3 || len(a.recs) != len(b.recs) {
		return false
	}
	for i, ra := range a.recs {
		rb := b.recs[i]
		if ra.name != rb.name || ra.window != rb.window || math.Abs(ra.z-rb.z) > 1e-3 || math.Abs(ra.e-rb.e) > 1e-3 || ra.w != rb.w || ra.u != rb.u {
			return false
		}
		if strings.HasPrefix(ra.name, "~") {
			fa, _ := strconv.ParseFloat(ra.f2, 64)
			fb, _ := strconv.ParseFloat(rb.f2, 64)
			if ra.f1 != rb.f1 || math.Abs(fa-fb) > 1e-3 {
				return false
			}
		}
	}
	return true
}

// TestConformanceWindow: the three-band policy's daily window holds 3;
// a fourth request is refused with its maximum wait, writing nothing, and
// granted without one at the next window's start (docs/protocol.md:
// Reserve, The state).
func TestConformanceWindow(t *testing.T) {
	c := newConn(t)
	args := func(us int64, m int, maxWait float64, costs ...float64) []string {
		return append(common(us, 250, "1", threeBands), requests(m, maxWait, costs...)...)
	}
	r := c.reserve("w", args(0, 3, -1, 1, 10)...)
	if !slices.Equal(r.waits, []int64{0, 0, 500_000_000}) || !slices.Equal(r.seqs, []int64{1, 2, 3}) {
		t.Fatalf("3 requests: waits %v seqs %v", r.waits, r.seqs)
	}
	if !slices.Equal(r.bands, []string{"~", "~", "rps"}) {
		t.Errorf("3 requests: binding bands %q, want ~ ~ rps (the third waits for the rps bucket)", r.bands)
	}
	before := c.get(c.key("w", ""))
	next := (t0/86_400_000_000+1)*86_400_000_000_000 - (t0*1000 + 250) // ns to the next UTC day
	r = c.reserve("w", args(0, 1, 5000000, 1, 10)...)
	if r.waits[0] != next || r.seqs[0] != 0 || r.bands[0] != "daily" || r.state != before || c.get(c.key("w", "")) != before {
		t.Errorf("refused: wait %d seq %d band %s state %s; want %d, 0, daily, unchanged %s", r.waits[0], r.seqs[0], r.bands[0], show(r.state), next, show(before))
	}
	r = c.reserve("w", args(0, 1, -1, 1, 10)...)
	st := c.parse(r.state)
	d, _ := st.band("daily")
	if r.waits[0] != next || r.seqs[0] != 4 || !d.window || d.w != t0/86_400_000_000+1 || d.u != 1 {
		t.Errorf("granted: wait %d seq %d state %s; want %d, 4, daily w%d 1", r.waits[0], r.seqs[0], show(r.state), next, t0/86_400_000_000+1)
	}
}

// TestConformanceFloorClosesWindow: a floor's last " *" (or "*" alone)
// counts in every window band's window current at now what the others may
// have taken of it since the state was written (its N, or what a bucket
// charging the same unit can grant in it), so that a member that starts
// pacing locally mid-window takes no more than the window left; the next
// window is its share as before. "*" alone floors no bucket
// (docs/protocol.md: Reserve's floor).
func TestConformanceFloorClosesWindow(t *testing.T) {
	c := newConn(t)
	today := t0 / 86_400_000_000
	next := (today+1)*86_400_000_000_000 - t0*1000 // ns to the next UTC day
	member := func(us int64, m int) []string {
		return append(common(us, 0, "m 3 0 0", threeBands), requests(m, -1, 1, 10)...)
	}
	floorOnly := func(k, env, floor string) reply {
		t.Helper()
		return c.decode(c.mustEval("RESERVE", c.reserveKeys(k), append(common(0, 0, env, threeBands), floor, "0")...))
	}
	// An absent key: the member's 1 a day (3 at a third) is taken by the
	// closed day; the bucket keeps its burst.
	r := floorOnly("z", "m 3 0 0", "*")
	d, _ := c.parse(r.state).band("daily")
	if len(r.waits) != 0 || !d.window || d.w != today || d.u != 3 {
		t.Fatalf("\"*\" alone: %d grants, state %s; want none, daily w%d 3", len(r.waits), show(r.state), today)
	}
	if r = c.reserve("z", member(0, 1)...); r.waits[0] != next || r.seqs[0] != 1 || r.bands[0] != "daily" {
		t.Errorf("after \"*\": wait %d seq %d band %s, want %d 1 daily (the next day)", r.waits[0], r.seqs[0], r.bands[0], next)
	}
	// With a horizon and a window's units: the bucket floored at 600 ms,
	// the units added, then the day closed.
	r = floorOnly("h", "1", "600000 daily:"+strconv.FormatInt(today, 10)+":1 *")
	if d, _ = c.parse(r.state).band("daily"); d.w != today || d.u != 3 {
		t.Errorf("\"600000 daily:%d:1 *\": state %s, want daily w%d 3", today, show(r.state), today)
	}
	if r = c.reserve("h", append(common(0, 0, "1", threeBands), requests(1, -1, 1, 10)...)...); r.waits[0] != next || r.seqs[0] != 1 {
		t.Errorf("after it, at the whole: wait %d seq %d, want %d 1", r.waits[0], r.seqs[0], next)
	}
	// A key already used today: a day at 1 of 3 is closed (3), a queue
	// already in a later day is left as it is.
	c.reserve("u", append(common(0, 0, "1", threeBands), requests(1, -1, 1, 10)...)...)
	if r = floorOnly("u", "1", "*"); func() bool { d, _ := c.parse(r.state).band("daily"); return d.w != today || d.u != 3 }() {
		t.Errorf("\"*\" on a day at 1: state %s, want daily w%d 3", show(r.state), today)
	}
	c.reserve("q", append(common(0, 0, "1", threeBands), requests(4, -1, 1, 10)...)...) // the 4th in the next day
	before := c.get(c.key("q", ""))
	if r = floorOnly("q", "1", "*"); func() bool { d, _ := c.parse(r.state).band("daily"); return d.w != today+1 || d.u != 1 }() {
		t.Errorf("\"*\" on a queue into the next day: state %s (before %s), want daily w%d 1", show(r.state), show(before), today+1)
	}
	// No window band: "*" changes nothing a reservation sees: a Limit's
	// burst is still there.
	r = c.decode(c.mustEval("RESERVE", c.reserveKeys("l"), append(common(0, 0, "1", limit(10, 2)), "*", "0")...))
	if r = c.reserve("l", append(common(0, 0, "1", limit(10, 2)), requests(2, -1, 1)...)...); !slices.Equal(r.waits, []int64{0, 0}) {
		t.Errorf("a Limit after \"*\": waits %v, want [0 0] (its burst)", r.waits)
	}
	// A calendar day (2026-03-08 in Los Angeles, its window 20520, ends
	// 0.5 s after now): closed; the next call goes at midnight.
	const table = "cday:America/Los_Angeles=20519:1772870400000000:86400000000*1,82800000000*1,86400000000*2 "
	cal := []string{"", clock(1773039599500000, 0) + table + "1", "1 requests 1 daily 1 c 3 day:America/Los_Angeles"}
	r = c.decode(c.mustEval("RESERVE", c.reserveKeys("cal"), append(slices.Clone(cal), "*", "0")...))
	if d, _ := c.parse(r.state).band("daily"); d.w != 20520 || d.u != 3 {
		t.Errorf("\"*\" on a calendar day: state %s, want daily w20520 3", show(r.state))
	}
	if r = c.reserve("cal", append(slices.Clone(cal), requests(1, -1, 1)...)...); r.waits[0] != 500_000_000 || r.bands[0] != "daily" {
		t.Errorf("after \"*\" on a calendar day: wait %d band %s, want 500000000 daily", r.waits[0], r.bands[0])
	}
	// A bucket charging the window's unit bounds what the others can have
	// taken: an hourly window of 100 ending 10 s after now, beside 1 a
	// second (burst 1). One unit taken now (the bucket empty at now):
	// at most 10 more in the window, so 11 of 100, not 100. A daily cap
	// far above what its buckets allow is not closed by a switch.
	hourly := "1 requests 2 rps 1 b 1 1 hourly 1 w 100 3600000000:0"
	near := int64(2_790_000_000) // t0 + 2790 s: 10 s before the hour's end
	c.reserve("b", append(common(near, 0, "1", hourly), requests(1, -1, 1)...)...)
	r = c.decode(c.mustEval("RESERVE", c.reserveKeys("b"), append(common(near, 0, "1", hourly), "*", "0")...))
	if d, _ := c.parse(r.state).band("hourly"); d.w != (t0+near)/3_600_000_000 || d.u != 11 {
		t.Errorf("\"*\" beside a bucket of 1/s, 10 s before the window's end: state %s, want hourly w%d 11", show(r.state), (t0+near)/3_600_000_000)
	}
	// With no state, from the window's start, the bucket full: an hourly
	// window of 100 beside 1 a minute (burst 1), closed at t0 + 2790 s,
	// 10 s before its end: at most 1 + 60 of it taken in its hour.
	slow := "1 requests 2 rpm 1 b 0.016666666666666666 1 hourly 1 w 100 3600000000:0"
	r = c.decode(c.mustEval("RESERVE", c.reserveKeys("s"), append(common(near, 0, "1", slow), "*", "0")...))
	if d, _ := c.parse(r.state).band("hourly"); d.u < 60.99 || d.u > 61.01 {
		t.Errorf("\"*\" on no state beside a bucket of 1/min: state %s, want hourly 61", show(r.state))
	}
	// Anything else in place of a horizon is refused.
	for _, f := range []string{"* 5", "x *", "**"} {
		if _, err := c.eval("RESERVE", c.reserveKeys("bad"), append(common(0, 0, "1", threeBands), f, "0")...); err == nil || !strings.Contains(err.Error(), "PACER_ARG") {
			t.Errorf("floor %q: error %v, want PACER_ARG", f, err)
		}
	}
}

// adjuster returns Adjust's keys for key k, and a call of Adjust on them
// at us (client clock, policy pol) of the reservation seq at slotUS: it
// returns the reply's applied (docs/protocol.md: Adjust), and checks that
// its state is the key's.
func adjuster(t *testing.T, c *conn, k, pol string) ([]string, func(us int64, op string, slotUS int64, seq string, costs ...string) any) {
	keys := []string{c.key(k, ""), c.key(k, ":limit"), c.key(k, ":done")}
	return keys, func(us int64, op string, slotUS int64, seq string, costs ...string) any {
		t.Helper()
		args := append(common(us, 0, "1", pol), op, at(slotUS), "0", seq)
		v := c.mustEval("ADJUST", keys, append(args, costs...)...)
		reply, ok := v.([]any)
		if !ok || len(reply) != 2 {
			t.Fatalf("Adjust's reply %#v: want [applied, state]", v)
		}
		if state, _ := reply[1].(string); state != c.get(keys[0]) {
			t.Errorf("Adjust's state %s, the key's %s", show(state), show(c.get(keys[0])))
		}
		return reply[0]
	}
}

// TestConformanceCancel: cancel gives back what later reservations have
// not built on, once; a passed slot gets nothing back; settle charges the
// difference (docs/protocol.md: Adjust).
func TestConformanceCancel(t *testing.T) {
	c := newConn(t)
	lim := limit(10, 1)
	keys, adjust := adjuster(t, c, "c", lim)
	// one is the common call: one request of cost 1, no maximum wait (no
	// floor, no requests argument).
	one := func(us int64) reply {
		return c.reserve("c", common(us, 0, "1", lim)...)
	}
	r := c.reserve("c", append(common(0, 0, "1", lim), requests(3, -1, 1)...)...)
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
	if got, want := c.get(keys[2]), "2@"+at(100_000)+" 4@"+at(300_000); got != want {
		t.Errorf("%s = %q, want %q", keys[2], got, want)
	}
	// A slot that has passed: applied, nothing given back.
	before := c.get(keys[0])
	if v := adjust(10_000, "cancel", 0, "1", "1"); v != int64(1) || c.get(keys[0]) != before {
		t.Errorf("cancel of a passed slot = %v, state %s; want 1, unchanged %s", v, show(c.get(keys[0])), show(before))
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

// TestConformanceAdjustAfterShareFell: what a settle or a cancel gives
// back is never more than its reservation took. A caller's share of the
// rate can fall between its reservation and the adjust (its view of the
// fleet now holds members pacing locally: "3 0 1" is a third), and at a
// share each unit is spaced wider; the units came back at that wider
// spacing, so a reservation made at the whole share gave back up to three
// times its units here, and the fleet went over its limit by the rest.
func TestConformanceAdjustAfterShareFell(t *testing.T) {
	c := newConn(t)
	lim := limit(10, 10)
	keys := []string{c.key("f", ""), c.key("f", ":limit"), c.key("f", ":done")}
	adjust := func(us int64, share, op string, slotUS int64, seq string, costs ...string) {
		t.Helper()
		args := append(common(us, 0, share, lim), op, at(slotUS), "0", seq)
		if v, ok := c.mustEval("ADJUST", keys, append(args, costs...)...).([]any); !ok || len(v) != 2 || v[0] != int64(1) {
			t.Fatalf("%s of %s: reply %v, want [1 state]", op, seq, v)
		}
	}
	// The whole burst, 10, at the whole share; settled at 4 a ms later at
	// a third: 6 come back (and 0.01 refilled), not 9.
	if r := c.reserve("f", append(common(0, 0, "1", lim), requests(1, -1, 10)...)...); r.waits[0] != 0 || r.seqs[0] != 1 {
		t.Fatalf("the burst: wait %d seq %d, want 0 1", r.waits[0], r.seqs[0])
	}
	adjust(1000, "3 0 1", "settle", 0, "1", "10", "4")
	r := c.reserve("f", append(common(1000, 0, "1", lim), requests(10, -1, 1)...)...)
	if want := []int64{0, 0, 0, 0, 0, 0, 99_000_000, 199_000_000, 299_000_000, 399_000_000}; !slices.Equal(r.waits, want) {
		t.Errorf("after the settle at a third: waits %v, want %v (6 at once, the 7th when 0.99 more has come)", r.waits, want)
	}
	// The key empty, 3 reserved ahead at the whole share, cancelled at a
	// third: the next unit's slot is where it was before them (at the
	// whole rate, 100 ms past the last of the 10 above), not earlier.
	last := r.waits[9]
	r = c.reserve("f", append(common(1000, 0, "1", lim), requests(1, -1, 3)...)...)
	if r.waits[0] != last+300_000_000 {
		t.Fatalf("3 ahead: wait %d, want %d", r.waits[0], last+300_000_000)
	}
	adjust(1000, "3 0 1", "cancel", 1000+r.waits[0]/1000, strconv.FormatInt(r.seqs[0], 10), "3")
	if r = c.reserve("f", append(common(1000, 0, "1", lim), requests(1, -1, 1)...)...); r.waits[0] != last+100_000_000 {
		t.Errorf("after the cancel at a third: wait %d, want %d (100 ms after the last slot)", r.waits[0], last+100_000_000)
	}
	// Made and settled at a third, saying so ("settle@"): what it did not
	// use comes back at the third's spacing, 300 ms a unit. The third's
	// burst is 3 (10 less the held ranks' 4 and 3).
	keys[0], keys[1], keys[2] = c.key("g", ""), c.key("g", ":limit"), c.key("g", ":done")
	third := func(us int64, m int) reply {
		return c.reserve("g", append(common(us, 0, "3 0 1", lim), requests(m, -1, 1)...)...)
	}
	if r = c.reserve("g", append(common(0, 0, "3 0 1", lim), requests(1, -1, 3)...)...); r.waits[0] != 0 {
		t.Fatalf("a third's burst: wait %d, want 0", r.waits[0])
	}
	adjust(1000, "3 0 1", "settle@", 0, strconv.FormatInt(r.seqs[0], 10), "3", "1")
	if r = third(1000, 3); !slices.Equal(r.waits, []int64{0, 0, 299_000_000}) {
		t.Errorf("settled at its own third: waits %v, want [0 0 299000000] (2 back, 1 ms of refill)", r.waits)
	}
}

// TestConformanceAdjustNewLineage: Adjust knows a reservation by its number
// and its slot, not its number alone. A key's numbers start again at 1 when
// Redis has lost it (restarted empty, flushed): a client that adjusts a
// reservation of the lost state once Redis is back (Go and Python keep the
// adjustments made while Redis was unavailable) must not take the number
// from the reservation of the new state that reaches it. Before, the new
// reservation's settle was then refused as already applied, and its raise
// was never paid: the combination runner's seed 2, over the limit on
// fair.example's tokens band.
func TestConformanceAdjustNewLineage(t *testing.T) {
	c := newConn(t)
	lim := limit(10, 1)
	_, adjust := adjuster(t, c, "n", lim)
	// The lost state's reservation 2, slotted a second before Redis came
	// back empty, settled at what it reserved.
	if v := adjust(0, "settle", -1_000_000, "2", "1", "1"); v != int64(1) {
		t.Fatalf("settle of the lost state's 2 = %v, want 1", v)
	}
	// The new state: 2 is its second reservation, at 100 ms.
	r := c.reserve("n", append(common(1, 0, "1", lim), requests(3, -1, 1)...)...)
	if !slices.Equal(r.seqs, []int64{1, 2, 3}) || !slices.Equal(r.waits, []int64{0, 100_000_000, 200_000_000}) {
		t.Fatalf("seqs %v waits %v, want [1 2 3] [0 100ms 200ms]", r.seqs, r.waits)
	}
	// Its settle at 3 applies: the next slot moves 200 ms later.
	if v := adjust(2, "settle", 100_001, "2", "1", "3"); v != int64(1) {
		t.Errorf("settle of the new state's 2 = %v, want 1 (taken for the lost state's 2)", v)
	}
	if r = c.reserve("n", common(3, 0, "1", lim)...); r.waits[0] != 500_001_000-3000 || r.seqs[0] != 4 {
		t.Errorf("after the settle: wait %d seq %d, want %d 4", r.waits[0], r.seqs[0], 500_001_000-3000)
	}
	// Each is still applied once.
	if v := adjust(4, "settle", 100_001, "2", "1", "3"); v != int64(0) {
		t.Errorf("the new state's settle again = %v, want 0", v)
	}
	if v := adjust(5, "settle", -1_000_000, "2", "1", "1"); v != int64(0) {
		t.Errorf("the lost state's settle again = %v, want 0", v)
	}
}

// TestConformancePause: no slot before the pause's end, and the bucket
// empty then; a shorter pause changes nothing; a pause with no band (the
// policy "") acts on every record (docs/protocol.md: Pause, The state).
func TestConformancePause(t *testing.T) {
	c := newConn(t)
	lim := limit(4, 2)
	pkeys := c.reserveKeys("p")[:2]
	v := c.mustEval("PAUSE", pkeys, append(common(0, 0, "1", lim), "1500000")...)
	if want := show([]any{t0, int64(0), int64(1500000000), int64(0), c.get(pkeys[0])}); show(v) != want {
		t.Errorf("Pause = %s, want %s (the reply ends with the state)", show(v), want)
	}
	st := c.parse(c.get(pkeys[0]))
	b, _ := st.band("permits")
	if st.pause != 1.5e9 || b.z != 1.5e9 {
		t.Errorf("paused state: p %v, z %v; want 1500000000, 1500000000", st.pause, b.z)
	}
	r := c.reserve("p", append(common(1, 0, "1", lim), requests(1, -1, 1)...)...)
	if r.waits[0] != 1_750_000_000-1000 || r.seqs[0] != 1 || r.bands[0] != "~p" {
		t.Errorf("after the pause: wait %d seq %d band %s, want %d (the pause's end + 1/rate) 1 ~p", r.waits[0], r.seqs[0], r.bands[0], 1_750_000_000-1000)
	}
	// On a twin key, two: the first after the pause is the pause's, the
	// second waits for the bucket (its queue lies beyond the pause).
	c.mustEval("PAUSE", c.reserveKeys("p2")[:2], append(common(0, 0, "1", lim), "1500000")...)
	if r := c.reserve("p2", append(common(1, 0, "1", lim), requests(2, -1, 1)...)...); !slices.Equal(r.bands, []string{"~p", "permits"}) {
		t.Errorf("two after the pause: bands %q, want ~p permits", r.bands)
	}
	before := c.parse(c.get(pkeys[0]))
	v = c.mustEval("PAUSE", pkeys, append(common(2, 0, "1", lim), "1000000")...)
	after := c.parse(c.get(pkeys[0]))
	if show(v) != show([]any{t0 + 2, int64(0), int64(1_500_000_000 - 2000), int64(1), c.get(pkeys[0])}) ||
		float64(after.t*1000)+after.pause != float64(before.t*1000)+before.pause {
		t.Errorf("a shorter pause = %s, state %+v; want the longer one in force", show(v), after)
	}
	// No band (the policy ""): every record of the three-band policy,
	// buckets empty at the end.
	c.reserve("p3", append(common(0, 0, "1", threeBands), requests(1, -1, 1, 10)...)...)
	c.mustEval("PAUSE", c.reserveKeys("p3")[:2], append(common(0, 0, "1", ""), "2000000")...)
	st = c.parse(c.get(c.key("p3", "")))
	for _, name := range []string{"rps", "tps"} {
		if b, ok := st.band(name); !ok || b.z != 2e9 {
			t.Errorf("pause with no band: %s's record %+v, want z 2000000000", name, b)
		}
	}
	r = c.reserve("p3", append(common(0, 0, "1", threeBands), requests(1, -1, 1, 10)...)...)
	if r.waits[0] != 2_500_000_000 {
		t.Errorf("after a pause with no band: wait %d, want 2500000000", r.waits[0])
	}
}

// TestConformanceLostHorizon: a lost key's horizon, ARGV[2]'s
// "!<h2>[:<seq>] " (docs/protocol.md, Common arguments and Reserve),
// applies only to a key Redis lost: no state, or a state whose last
// reservation is numbered before seq. Then every bucket is empty until now
// + h2; otherwise it floors nothing and writes nothing, with requests or
// alone (requests "0").
func TestConformanceLostHorizon(t *testing.T) {
	c := newConn(t)
	lim := limit(10, 1) // 100 ms apart
	// withHorizon is one plain request with the horizon h ("" for none)
	// in ARGV[2].
	withHorizon := func(us int64, h string) []string {
		env := "1"
		if h != "" {
			env = h + " 1"
		}
		return common(us, 0, env, lim)
	}
	// No state (Redis restarted empty): the slots it granted before it
	// forgot them are not granted again.
	if r := c.reserve("lost", withHorizon(0, "!500000:7")...); r.waits[0] != 600_000_000 || r.seqs[0] != 1 {
		t.Errorf("no state, horizon 500 ms: wait %d seq %d, want 600000000 (after the horizon, 1/rate) 1", r.waits[0], r.seqs[0])
	}
	// A state numbered at or after seq knows its own schedule.
	c.reserve("known", withHorizon(0, "")...) // seq 1, z 100 ms
	state := c.get(c.key("known", ""))
	if r := c.reserve("known", withHorizon(0, "!500000:1")...); r.waits[0] != 100_000_000 || r.seqs[0] != 2 {
		t.Errorf("state numbered 1, horizon seq 1: wait %d seq %d, want 100000000 2 (the horizon ignored)", r.waits[0], r.seqs[0])
	}
	// A state numbered before seq (rebuilt since, or a replica that
	// missed the latest writes): the horizon applies.
	c.reserve("behind", withHorizon(0, "")...) // seq 1
	if r := c.reserve("behind", withHorizon(0, "!500000:5")...); r.waits[0] != 600_000_000 || r.seqs[0] != 2 {
		t.Errorf("state numbered 1, horizon seq 5: wait %d seq %d, want 600000000 2", r.waits[0], r.seqs[0])
	}
	// With the other parts of ARGV[2] around it, in their order: the
	// format before it, the share after it.
	r := c.reserve("lost2", common(0, 0, "f2 !500000:7 1", lim)...)
	if st := c.parse(r.state); r.waits[0] != 600_000_000 || st.format != 2 {
		t.Errorf("\"f2 !500000:7 1\" on no state: wait %d, state %s; want 600000000, format 2", r.waits[0], show(r.state))
	}
	// m = 0: the horizon alone writes nothing to a key it does not apply
	// to (a state numbered at or after seq, or any state when no seq is
	// given), and floors a lost one.
	before := c.get(c.key("known", ""))
	if before == state {
		t.Fatalf("the second reservation left the state as it was: %s", show(state))
	}
	for _, h := range []string{"!900000:1", "!900000:2", "!900000"} {
		v := c.mustEval("RESERVE", c.reserveKeys("known"), append(withHorizon(0, h), "", "0")...)
		if r := c.decode(v); len(r.waits) != 0 || r.state != before {
			t.Errorf("horizon %s alone on a state numbered 2: reply %s, want no request and the state as it was", h, show(v))
		}
		if got := c.get(c.key("known", "")); got != before {
			t.Errorf("horizon %s alone on a state numbered 2 wrote %s over %s", h, show(got), show(before))
		}
	}
	c.mustEval("RESERVE", c.reserveKeys("gone"), append(withHorizon(0, "!900000"), "", "0")...)
	if r := c.reserve("gone", withHorizon(0, "")...); r.waits[0] != 1_000_000_000 {
		t.Errorf("after a horizon alone on a lost key: wait %d, want 1000000000", r.waits[0])
	}
	c.reserve("behind2", withHorizon(0, "")...) // seq 1
	c.mustEval("RESERVE", c.reserveKeys("behind2"), append(withHorizon(0, "!900000:4"), "", "0")...)
	if r := c.reserve("behind2", withHorizon(0, "")...); r.waits[0] != 1_000_000_000 || r.seqs[0] != 2 {
		t.Errorf("after a horizon alone on a state numbered before its seq: wait %d seq %d, want 1000000000 2", r.waits[0], r.seqs[0])
	}
	// Lease takes it in ARGV[2] too: on a lost key its run starts after
	// the horizon; on a key that knows its schedule, where it would have.
	for _, tc := range []struct {
		k, h        string
		first, last int64
	}{
		{"leaselost", "!500000:3", 600_000_000, 800_000_000},
		{"lost2", "!900000:1", 700_000_000, 900_000_000}, // numbered 1 already: its own schedule
	} {
		v := c.mustEval("LEASE", c.reserveKeys(tc.k)[:2], append(withHorizon(0, tc.h), "3", "1")...)
		a, _ := v.([]any)
		if len(a) != 9 || a[2] != int64(3) || a[4] != tc.first || a[5] != tc.last {
			t.Errorf("Lease of 3 on %s with %s: %s, want 3 slots from %d to %d", tc.k, tc.h, show(v), tc.first, tc.last)
		}
	}
	// A malformed horizon is refused, and changes nothing.
	for _, h := range []string{"!x", "!500000:x", "!-5", "!"} {
		if _, err := c.eval("RESERVE", c.reserveKeys("bad"), withHorizon(0, h)...); code(err) != "PACER_ARG" {
			t.Errorf("horizon %q: err %v, want PACER_ARG", h, err)
		}
	}
	if got := c.get(c.key("bad", "")); got != "" {
		t.Errorf("a refused call wrote %s", show(got))
	}
}

// TestConformanceStale: a call whose deadline (ARGV[1], docs/protocol.md,
// Common arguments) Redis runs after is refused with PACER_STALE and
// changes nothing, on the fast path and the general one; before it, the
// call is served as without; a client clock ignores it.
func TestConformanceStale(t *testing.T) {
	c := newConn(t)
	now, _ := c.do("TIME")
	nowMS := func() int64 { s, _ := strconv.ParseInt(now.([]any)[0].(string), 10, 64); return s * 1000 }()
	past, future := strconv.FormatInt(nowMS-1000, 10), strconv.FormatInt(nowMS+60_000, 10)
	c.volatile(nowMS-1000, "{ms-1000}")
	c.volatile(nowMS+60_000, "{ms+60000}")
	for _, tc := range []struct {
		name, policy string
	}{
		{"a Limit (fast.lua)", limit(10, 1)},
		{"two bands (core.lua)", "1 permits 2 a 1 b 10 1 b 1 b 5 2"},
	} {
		k := strings.ReplaceAll(tc.name, " ", "")
		if _, err := c.eval("RESERVE", c.reserveKeys(k), past, "1", tc.policy); code(err) != "PACER_STALE" {
			t.Errorf("%s: a call run after its deadline: %v, want PACER_STALE", tc.name, err)
		}
		if got := c.get(c.key(k, "")); got != "" {
			t.Errorf("%s: a stale call wrote %s", tc.name, show(got))
		}
		if _, err := c.eval("RESERVE", c.reserveKeys(k), future, "1", tc.policy); err != nil {
			t.Errorf("%s: a call before its deadline: %v", tc.name, err)
		}
		if _, err := c.eval("RESERVE", c.reserveKeys(k), future, "f1 1", tc.policy); err != nil {
			t.Errorf("%s: a deadline, and a format: %v", tc.name, err)
		}
	}
	// A client clock: the deadline means nothing on it.
	args := common(0, 0, "1", limit(10, 1))
	args[0] = past
	if _, err := c.eval("RESERVE", c.reserveKeys("client"), args...); err != nil {
		t.Errorf("a deadline with a client clock: %v, want it ignored", err)
	}
	for _, d := range []string{"x", "-5", "1.5", "inf"} {
		if _, err := c.eval("RESERVE", c.reserveKeys("bad"), d, "1", limit(10, 1)); code(err) != "PACER_ARG" {
			t.Errorf("a malformed deadline %q: %v, want PACER_ARG", d, err)
		}
	}
}

// TestConformanceBadArguments: each malformed call is refused with its
// code and changes nothing, on an absent key and on a state (docs/
// protocol.md: Errors, Common arguments, Reserve).
func TestConformanceBadArguments(t *testing.T) {
	c := newConn(t)
	good := func(us int64) []string {
		return append(common(us, 0, "1", limit(10, 3)), requests(1, -1, 1)...)
	}
	set := func(i int, v string) func([]string) []string {
		return func(a []string) []string { a[i] = v; return a }
	}
	env := func(e string) func([]string) []string { return set(1, clock(t0+1, 0)+e) }
	policy := func(p string) func([]string) []string { return set(2, p) }
	reqs := func(v ...float64) func([]string) []string { return set(4, doubles(v...)) }
	inf, nan := math.Inf(1), math.NaN()
	negNaN := math.Float64frombits(0xfff8000000000000)
	reserveCases := []struct {
		name, code string
		edit       func([]string) []string
	}{
		// The policy: a Limit's "L" and two doubles.
		{"rate 0", "PACER_ARG", policy(limit(0, 3))},
		{"rate -1", "PACER_ARG", policy(limit(-1, 3))},
		{"rate inf", "PACER_ARG", policy(limit(inf, 3))},
		{"rate -inf", "PACER_ARG", policy(limit(-inf, 3))},
		{"rate NaN", "PACER_ARG", policy(limit(nan, 3))},
		{"rate -NaN", "PACER_ARG", policy(limit(negNaN, 3))},
		{"burst 0", "PACER_ARG", policy(limit(10, 0))},
		{"burst 1.5", "PACER_ARG", policy(limit(10, 1.5))},
		{"burst inf", "PACER_ARG", policy(limit(10, inf))},
		{"burst NaN", "PACER_ARG", policy(limit(10, nan))},
		{"L alone", "PACER_ARG", policy("L")},
		{"L and one double", "PACER_ARG", policy("L" + doubles(10))},
		{"L and three doubles", "PACER_ARG", policy("L" + doubles(10, 3, 1))},
		{"L and 16 bytes and one more", "PACER_ARG", policy(limit(10, 3) + "x")},
		// The policy as text.
		{"rate x", "PACER_ARG", policy("1 permits 1 permits 1 b x 3")},
		{"rate nan (text)", "PACER_ARG", policy("1 permits 1 permits 1 b nan 3")},
		{"k 2, one band", "PACER_ARG", policy("1 permits 2 permits 1 b 10 3")},
		{"k 0", "PACER_ARG", policy("1 permits 0")},
		{"k 1, two bands", "PACER_ARG", policy("1 permits 1 permits 1 b 10 3 more 1 b 5 1")},
		{"kind x", "PACER_ARG", policy("1 permits 1 permits 1 x 10 3")},
		{"name ~x", "PACER_ARG", policy("1 permits 1 ~x 1 b 10 3")},
		{"window N 0", "PACER_ARG", policy("1 permits 1 permits 1 w 0 1000:0")},
		{"window length 0", "PACER_ARG", policy("1 permits 1 permits 1 w 3 0:0")},
		{"window without origin", "PACER_ARG", policy("1 permits 1 permits 1 w 3 1000")},
		{"units 2, one named", "PACER_ARG", policy("2 permits 1 permits 1 b 10 3")},
		{"no policy", "PACER_ARG", policy("")},
		// The requests: little-endian doubles, max_wait_us then a cost per unit.
		{"requests of 15 bytes", "PACER_ARG", set(4, doubles(-1, 1)[:15])},
		{"requests of 8 bytes", "PACER_ARG", reqs(-1)},
		{"requests of 24 bytes", "PACER_ARG", reqs(-1, 1, -1)},
		{"requests of 17 bytes", "PACER_ARG", set(4, doubles(-1, 1)+"x")},
		{"requests as text", "PACER_ARG", set(4, "1")},
		{"max wait NaN", "PACER_ARG", reqs(nan, 1)},
		{"max wait -NaN", "PACER_ARG", reqs(negNaN, 1)},
		{"max wait inf", "PACER_ARG", reqs(inf, 1)},
		{"max wait -inf", "PACER_ARG", reqs(-inf, 1)},
		{"max wait -2", "PACER_ARG", reqs(-2, 1)},
		{"max wait -0.5", "PACER_ARG", reqs(-0.5, 1)},
		{"cost -1", "PACER_ARG", reqs(-1, -1)},
		{"cost NaN", "PACER_ARG", reqs(-1, nan)},
		{"cost -NaN", "PACER_ARG", reqs(-1, negNaN)},
		{"cost inf", "PACER_ARG", reqs(-1, inf)},
		{"cost -inf", "PACER_ARG", reqs(-1, -inf)},
		{"a good request, then a NaN cost", "PACER_ARG", reqs(-1, 1, -1, nan)},
		{"cost above the burst", "PACER_EXCEEDS", reqs(-1, 4)},
		{"an argument after the requests", "PACER_ARG", func(a []string) []string { return append(a, "") }},
		// The environment (ARGV[2]).
		{"format f4", "PACER_ARG", env("f4 1")},
		{"format fx", "PACER_ARG", env("fx 1")},
		{"format without share", "PACER_ARG", env("f1")},
		{"share 0", "PACER_ARG", env("0")},
		{"share of 2 with no rank held", "PACER_ARG", env("2")},
		{"share x", "PACER_ARG", env("x")},
		{"no share", "PACER_ARG", env("")},
		{"parts out of order", "PACER_ARG", env("!500000:1 f2 1")},
		{"format after the share", "PACER_ARG", env("1 f2")},
		{"calendar tables without share", "PACER_ARG", env("cday:UTC=19675:1699920000000000:86400000000*3")},
		{"lost horizon without share", "PACER_ARG", env("!500000:1")},
		{"clock without its ns", "PACER_ARG", set(1, "t"+at(1)+" 1")},
		{"clock x", "PACER_ARG", set(1, "tx:0 1")},
		{"clock without share", "PACER_ARG", set(1, "t"+at(1)+":0")},
		{"empty environment", "PACER_ARG", set(1, "")},
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
			t.Errorf("bad Reserves on %s wrote %s over %s", k, show(got), show(before))
		}
		lim := common(1, 0, "1", limit(10, 3))
		for _, tc := range []struct {
			name, script, code string
			args               []string
		}{
			{"Adjust refund", "ADJUST", "PACER_ARG", append(slices.Clone(lim), "refund", at(0), "0", "1", "1")},
			{"Adjust slot x", "ADJUST", "PACER_ARG", append(slices.Clone(lim), "cancel", "x", "0", "1", "1")},
			{"Adjust id with a space", "ADJUST", "PACER_ARG", append(slices.Clone(lim), "cancel", at(0), "0", "1 2", "1")},
			{"Adjust settle without the actual cost", "ADJUST", "PACER_ARG", append(slices.Clone(lim), "settle", at(0), "0", "1", "1")},
			{"Adjust with a bad L", "ADJUST", "PACER_ARG", append(common(1, 0, "1", "L"+doubles(10)), "cancel", at(0), "0", "1", "1")},
			{"Pause 0", "PAUSE", "PACER_ARG", append(slices.Clone(lim), "0")},
			{"Pause -5", "PAUSE", "PACER_ARG", append(slices.Clone(lim), "-5")},
			{"Pause with a bad environment", "PAUSE", "PACER_ARG", append(common(1, 0, "f9 1", ""), "1000")},
			{"Peek cost -1", "PEEK", "PACER_ARG", append(slices.Clone(lim), "-1")},
			{"Peek cost above the burst", "PEEK", "PACER_EXCEEDS", append(slices.Clone(lim), "4")},
			{"Peek rate 0", "PEEK", "PACER_ARG", append(common(1, 0, "1", limit(0, 3)), "1")},
			{"Peek rate NaN", "PEEK", "PACER_ARG", append(common(1, 0, "1", limit(nan, 3)), "1")},
			{"Rewrite format f4", "REWRITE", "PACER_ARG", common(1, 0, "f4 1", "")},
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
			t.Errorf("bad calls on %s wrote %s over %s", k, show(got), show(before))
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
		t.Errorf("Reserve under a malformed stored limit wrote %s", show(got))
	}
}

// TestConformanceNaN: NaN and infinities are malformed wherever a number
// is, as docs/protocol.md's Errors says, and so are a fractional burst, a
// unit index outside the policy's units, a negative maximum wait other
// than -1 and a pause that is not a positive whole number of µs:
// PACER_ARG, nothing written. (NaN passed every check once: a <= 0 and b <
// 1 are false for it, and a NaN window N granted every request. reserve's
// Go code refuses these before it calls; another client could send them.)
func TestConformanceNaN(t *testing.T) {
	c := newConn(t)
	nan, inf := math.NaN(), math.Inf(1)
	for i, tc := range []struct {
		policy  string
		maxWait float64
	}{
		{limit(nan, 3), -1},
		{"1 permits 1 permits 1 b nan 3", -1},
		{"1 permits 1 permits 1 b NaN 3", -1},
		{limit(10, nan), -1},
		{limit(10, inf), -1},
		{"1 permits 1 permits 1 b 10 inf", -1},
		{limit(10, 1.5), -1}, // a burst is a whole number of units
		{"1 permits 1 permits 1 w nan 1000000:0", -1},
		{"1 permits 1 permits 1 w inf 1000000:0", -1},
		{"1 permits 1 permits 2 b 10 3", -1}, // a unit index beyond the policy's units
		{"1 permits 1 permits 0 b 10 3", -1},
		{limit(10, 3), nan}, // a maximum wait that is not a number >= 0 (or -1)
		{limit(10, 3), inf},
		{limit(10, 3), -2},
	} {
		k := fmt.Sprintf("nan:%d", i)
		_, err := c.eval("RESERVE", c.reserveKeys(k), append(common(0, 0, "1", tc.policy), requests(1, tc.maxWait, 1)...)...)
		if code(err) != "PACER_ARG" {
			t.Errorf("Reserve with policy %s, max wait %v: %v, want PACER_ARG", show(tc.policy), tc.maxWait, err)
		}
		if got := c.get(c.key(k, "")); got != "" {
			t.Errorf("Reserve with policy %s, max wait %v wrote %s", show(tc.policy), tc.maxWait, show(got))
		}
	}
	// The other scripts' numbers: NaN and infinities are malformed there
	// too.
	lim := common(0, 0, "1", limit(10, 3))
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
		{"FAIR", c.fairKeys, []string{"2 1 nan 0 1 0 1 0 w", "acme", "", doubles(-1, 1)}},
		{"FAIR", c.fairKeys, []string{"2 1 0 nan 1 0 1 0 w", "acme", "", doubles(-1, 1)}},
		{"FAIR", c.fairKeys, []string{"2 1 0 0 1 0 1 0 w", "acme", "", doubles(nan, 1)}},
		{"FAIR", c.fairKeys, []string{"2 1 0 0 1 0 1 0 w", "acme", "", doubles(-1, inf)}},
	} {
		k := fmt.Sprintf("nanop:%s:%s", tc.script, strings.Join(tc.args[:len(tc.args)-1], ","))
		if tc.script == "FAIR" {
			k += fmt.Sprintf(":%x", tc.args[len(tc.args)-1])
		}
		_, err := c.eval(tc.script, tc.keys(k), append(slices.Clone(lim), tc.args...)...)
		if code(err) != "PACER_ARG" {
			t.Errorf("%s %q: %v, want PACER_ARG", tc.script, tc.args, err)
		}
		if got := c.get(c.key(k, "")); got != "" {
			t.Errorf("%s %q wrote %s", tc.script, tc.args, show(got))
		}
	}
	// A pause is a positive whole number of µs.
	for _, d := range []string{"nan", "inf", "0.5", "0", "-3"} {
		k := "nanpause:" + d
		_, err := c.eval("PAUSE", c.reserveKeys(k)[:2], append(common(0, 0, "1", limit(10, 3)), d)...)
		if code(err) != "PACER_ARG" {
			t.Errorf("Pause %q: %v, want PACER_ARG", d, err)
		}
		if got := c.get(c.key(k, "")); got != "" {
			t.Errorf("Pause %q wrote %s", d, show(got))
		}
	}
}

// everyScript returns a call of each script that reads KEYS[1] (every
// script built on core.lua, and Admin) on key k with the common arguments
// lim (their policy a Limit's, or another of one unit: costs of 1) and
// cost the costs of one request per unit as text, by name: the script's
// upper-case name, its keys and its arguments.
func (c *conn) everyScript(k string, lim []string, cost ...string) map[string][]any {
	rk := c.reserveKeys(k)
	costs := make([]float64, len(cost))
	for i, x := range cost {
		costs[i], _ = strconv.ParseFloat(x, 64)
	}
	with := func(more ...string) []string { return append(slices.Clone(lim), more...) }
	noBand := slices.Clone(lim)
	noBand[2] = ""
	return map[string][]any{
		"Reserve": {"RESERVE", rk, with(requests(1, -1, costs...)...)},
		"Fair":    {"FAIR", c.fairKeys(k), with(append([]string{"2 1 0 0 1 0 1 0 w", "acme"}, requests(1, -1, costs...)...)...)},
		"Adjust":  {"ADJUST", []string{rk[0], rk[1], c.key(k, ":done")}, with(append([]string{"cancel", at(0), "0", "1"}, cost...)...)},
		"Pause":   {"PAUSE", rk[:2], with("1000")},
		"Peek":    {"PEEK", rk[:2], with(cost...)},
		"Claim":   {"CLAIM", []string{rk[0], rk[1], c.key(k, ":h:a")}, with(append([]string{"1000000000", "1", "1000000", "0"}, cost...)...)},
		"Hold":    {"HOLD", []string{rk[0], rk[1], c.key(k, ":h:b")}, with(append([]string{"1000000", "0", "1"}, cost...)...)},
		"Lease":   {"LEASE", rk[:2], with("2", "1")},
		"Resume":  {"RESUME", rk[:2], noBand},
		"Rewrite": {"REWRITE", rk[:2], noBand},
		"Admin":   {"ADMIN", c.adminKeys(k), []string{"set", "enforce 1 permits permits b 5 1", "me", "test", "50", ""}},
	}
}

// adminKeys are Admin's KEYS ("The stored limit and Admin").
func (c *conn) adminKeys(k string) []string {
	return []string{c.key(k, ""), c.key(k, ":limit"), c.key(k, ":shadow"), c.key(k, ":history"), c.key(k, ":weights")}
}

// TestConformanceWrongType: a key of another type, or a string that is no
// state of a format this release reads (a future format starts with a
// byte none of the three does; a format 3 state of a form it does not
// know, or cut short), is refused by every script with PACER_WRONGTYPE and
// left as it is (docs/protocol.md: Errors, Versions, The state).
func TestConformanceWrongType(t *testing.T) {
	c := newConn(t)
	lim := common(0, 0, "1", limit(10, 3))
	check := func(k, what, keyType string) {
		t.Helper()
		all := c.everyScript(k, lim, "1")
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
	b28 := strings.Repeat("\x01", 27)
	for i, s := range []string{
		"hello", "F3 1700000000000000 7000 5 0 2000000000 2000000000", "2 1700000000000000 7000 5 0 x", "1 x",
		"\x9f" + b28,        // under 0xA0: not format 3, nor text
		"\xa0" + b28[:9],    // 0xA0's form is 11 bytes
		"\xa1" + b28[:11],   // ... not 12
		"\xb0" + b28[:26],   // 0xB0's 28
		"\xc1" + b28,        // 0xC0's 34
		"\xd0" + b28[:20],   // the general form's head is 28 bytes
		"\xe0" + b28,        // no form
		"\xf1" + b28 + " x", // no form
		"\xff",
	} {
		k := fmt.Sprintf("str:%d", i)
		c.do("SET", c.key(k, ""), s)
		check(k, show(s), "string")
		if got, _ := c.do("GET", c.key(k, "")); got != s {
			t.Errorf("%s became %s", show(s), show(got))
		}
	}
	// The general form with a pause that is no number: the scripts built
	// on core.lua refuse it (Admin sets a flag, and reads no field).
	nanPause := "\xd0" + doubles(0)[:7] + strings.Repeat("\x00", 12) + doubles(math.NaN())
	c.do("SET", c.key("nanp", ""), nanPause)
	nanCalls := c.everyScript("nanp", lim, "1")
	for _, name := range slices.Sorted(maps.Keys(nanCalls)) {
		call := nanCalls[name]
		if name == "Admin" {
			continue
		}
		if _, err := c.eval(call[0].(string), call[1].([]string), call[2].([]string)...); code(err) != "PACER_WRONGTYPE" {
			t.Errorf("%s on a general form whose pause is NaN: %v, want PACER_WRONGTYPE", name, err)
		}
	}
	// The stored limit's key and Adjust's memory.
	c.do("HSET", c.key("hl", ":limit"), "a", "b")
	if _, err := c.eval("RESERVE", c.reserveKeys("hl"), append(slices.Clone(lim), requests(1, -1, 1)...)...); code(err) != "PACER_WRONGTYPE" {
		t.Errorf("Reserve with a hash at :limit: %v, want PACER_WRONGTYPE", err)
	}
	c.do("RPUSH", c.key("hd", ":done"), "x")
	if _, err := c.eval("ADJUST", []string{c.key("hd", ""), c.key("hd", ":limit"), c.key("hd", ":done")}, append(slices.Clone(lim), "cancel", at(0), "0", "1", "1")...); code(err) != "PACER_WRONGTYPE" {
		t.Errorf("Adjust with a list at :done: %v, want PACER_WRONGTYPE", err)
	}
}

// TestConformanceFormat3: format 3's four forms (docs/protocol.md, The
// state), each as the scripts write it, its flag (a stored limit may
// exist) as Admin sets it, and each read by every script: a key holding a
// state in format 3 answers every script as its twin holding the same
// state in format 2 does (Rewrite with "f2 " turns one into the other, and
// with "" back, byte for byte), and a server-clock Reserve (fast.lua) reads
// a Limit's forms.
func TestConformanceFormat3(t *testing.T) {
	c := newConn(t)
	const stored = "enforce 1 permits permits b 0.5 3"
	type form struct {
		name   string
		first  byte
		size   int // 0: 28 or more
		policy string
		cost   []string
		write  func(k string) // at t0
	}
	plain := func(pol string) func(k string) {
		return func(k string) { c.reserve(k, common(0, 0, "1", pol)...) }
	}
	forms := []form{
		{"A: a Limit's one call, at once", 0xA0, 11, limit(1, 1), []string{"1"}, plain(limit(1, 1))},
		{"B: the burst's first, whole ns", 0xB0, 28, limit(1, 3), []string{"1"}, plain(limit(1, 3))},
		{"C: z 312.5 ns after t", 0xC0, 34, limit(3.2e6, 1), []string{"1"}, func(k string) {
			c.reserve(k, append(common(0, 0, "1", limit(3.2e6, 1)), requests(2, -1, 1)...)...)
		}},
		{"D: three bands", 0xD0, 0, threeBands, []string{"1", "10"}, func(k string) {
			c.reserve(k, append(common(0, 0, "1", threeBands), requests(2, -1, 1, 10)...)...)
		}},
		{"D: a Limit paused", 0xD0, 0, limit(4, 2), []string{"1"}, func(k string) {
			c.reserve(k, common(0, 0, "1", limit(4, 2))...)
			c.mustEval("PAUSE", c.reserveKeys(k)[:2], append(common(0, 0, "1", limit(4, 2)), "1500000")...)
		}},
	}
	n := len(forms)
	for i := range n {
		// Each with its flag: Admin's set on the state as written.
		f := forms[i]
		base := f.write
		f.name, f.first = f.name+", flagged", f.first+1
		f.write = func(k string) {
			base(k)
			before := c.get(c.key(k, ""))
			if _, err := c.eval("ADMIN", c.adminKeys(k), "set", stored, "me", "test", "50", ""); err != nil {
				t.Fatalf("Admin set on a format 3 state %s: %v", show(before), err)
			}
			if got := c.get(c.key(k, "")); len(got) != len(before) || got[0] != before[0]|1 || got[1:] != before[1:] {
				t.Errorf("Admin set on %s: the state is %s, want its first byte's lowest bit set, nothing else changed", show(before), show(got))
			}
		}
		forms = append(forms, f)
	}
	for i, f := range forms {
		k3, k2 := fmt.Sprintf("f3:%d", i), fmt.Sprintf("f2:%d", i)
		f.write(k3)
		s := c.get(c.key(k3, ""))
		st := c.parse(s)
		if s == "" || s[0] != f.first || (f.size > 0 && len(s) != f.size) || (f.size == 0 && len(s) < 28) || st.format != 3 {
			t.Errorf("%s: the state written is %s, want the form %#x of %d bytes", f.name, show(s), f.first, f.size)
			continue
		}
		lim, _ := c.do("GET", c.key(k3, ":limit"))
		// The twin: the same state, rewritten in format 2 at the time it
		// was written (so nothing is rebased), and back.
		c.do("SET", c.key(k2, ""), s)
		if lim != nil {
			c.do("SET", c.key(k2, ":limit"), lim)
		}
		v2 := c.mustEval("REWRITE", c.reserveKeys(k2)[:2], common(0, 0, "f2 1", "")...)
		s2, _ := v2.(string)
		if st2 := c.parse(s2); st2.format != 2 || !statesClose(st, st2) {
			t.Errorf("%s: Rewrite to format 2: %s, want %s's meaning", f.name, show(s2), show(s))
		}
		if v := c.mustEval("REWRITE", c.reserveKeys(k2)[:2], common(0, 0, "1", "")...); v != s {
			t.Errorf("%s: Rewrite back to format 3: %s, want %s", f.name, show(v), show(s))
		}
		c.do("SET", c.key(k2, ""), s2)
		// Every script, on both, in turn, at one time: the same replies,
		// and the same states after each (formats 2 and 3 written to a
		// thousandth of a ns: states are compared by what they say).
		lim3 := common(500, 0, "1", f.policy)
		on3, on2 := c.everyScript(k3, lim3, f.cost...), c.everyScript(k2, lim3, f.cost...)
		for _, name := range []string{"Peek", "Reserve", "Fair", "Adjust", "Claim", "Hold", "Lease", "Pause", "Resume", "Rewrite"} {
			a, b := on3[name], on2[name]
			va, ea := c.eval(a[0].(string), a[1].([]string), a[2].([]string)...)
			vb, eb := c.eval(b[0].(string), b[1].([]string), b[2].([]string)...)
			if ea != nil || eb != nil {
				if fmt.Sprint(ea) != fmt.Sprint(eb) {
					t.Errorf("%s: %s: %v on format 3, %v on format 2", f.name, name, ea, eb)
				}
				continue
			}
			if name == "Reserve" || name == "Fair" {
				va, vb = decodeReserve(t, va), decodeReserve(t, vb)
			}
			if !c.sameReply(va, vb) {
				t.Errorf("%s: %s: %s on format 3, %s on format 2", f.name, name, show(va), show(vb))
			}
			ga, gb := c.get(c.key(k3, "")), c.get(c.key(k2, ""))
			if sa, err := parseState(ga); err != nil || !statesClose(sa, c.parse(gb)) {
				t.Errorf("%s: after %s: %s on format 3, %s on format 2", f.name, name, show(ga), show(gb))
			}
		}
	}
	// fast.lua, on the server's clock, reads a Limit's three forms (and
	// their flags: it leaves a flagged state to core.lua).
	for i, f := range forms {
		if f.first&^1 == 0xD0 {
			continue
		}
		k := fmt.Sprintf("fast:%d", i)
		f.write(k)
		st := c.parse(c.get(c.key(k, "")))
		r := c.reserve(k, "", "1", f.policy)
		if len(r.seqs) != 1 || r.seqs[0] != st.seq+1 {
			t.Errorf("%s: a Reserve on the server's clock: %v, want seq %d", f.name, r.seqs, st.seq+1)
		}
	}
}

// sameReply reports whether two replies of one script, on a key in format
// 3 and its twin in format 2, agree: equal, but for the states they hold,
// which must say the same (statesClose).
func (c *conn) sameReply(a, b any) bool {
	switch x := a.(type) {
	case reserveReply:
		y, ok := b.(reserveReply)
		return ok && x.nowUS == y.nowUS && x.nowNS == y.nowNS && slices.Equal(x.grants, y.grants) && x.stored == y.stored &&
			x.bys == y.bys && c.sameReply(x.state, y.state)
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !c.sameReply(x[i], y[i]) {
				return false
			}
		}
		return true
	case string:
		y, ok := b.(string)
		if !ok {
			return false
		}
		if x == y {
			return true
		}
		sa, err1 := parseState(x)
		sb, err2 := parseState(y)
		return err1 == nil && err2 == nil && statesClose(sa, sb)
	}
	return reflect.DeepEqual(a, b)
}

// fleetKeys are Heartbeat's first n KEYS ("Heartbeat"): 12 as this
// release passes them; 8 leaves out P{limiters}:reads and the indexes, as
// the release before passes them.
func (c *conn) fleetKeys(n int) []string {
	fleet := []string{c.key("limiters", "")}
	for _, s := range fleetSuffixes[:n-1] {
		fleet = append(fleet, c.key("limiters", s))
	}
	return fleet
}

// TestConformanceHeartbeatOrder: a heartbeat sent before its Limiter
// last changed mode (docs/protocol.md, Heartbeat: its since_ms older than
// the one recorded for the other mode) changes nothing and is answered
// {now_ms}: Redis may run heartbeats queued while it stalled in any order.
func TestConformanceHeartbeatOrder(t *testing.T) {
	c := newConn(t)
	fleet := c.fleetKeys(12)
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
		{"redis", "1000", 12, "redis 1000 0 0"},
		{"local", "2000", 12, "local 2000 0 0"},
		{"redis", "1000", 1, "local 2000 0 0"}, // sent before the switch, run after
		{"local", "2000", 12, "local 2000 0 0"},
		{"redis", "3000", 12, "redis 3000 0 0"}, // back on Redis
		{"redis", "3000", 12, "redis 3000 0 0"},
	} {
		if got := beat(step.mode, step.since); len(got) != step.entries || rec() != step.record {
			t.Errorf("step %d: Heartbeat %s since %s = %s, record %q; want %d entries, record %q", i, step.mode, step.since, show(got), rec(), step.entries, step.record)
		}
	}
}

// TestConformanceHeartbeatHeldSizes: the held members' sizes, each once
// and in order (the reply's held_sizes), and the largest (held_n): two
// members pacing locally, one on a fleet of 2 (it lost Redis before it
// heard of the third), one on 3; a kept rank counts its fleet's size
// (combination runner, seed 15).
func TestConformanceHeartbeatHeldSizes(t *testing.T) {
	c := newConn(t)
	fleet := c.fleetKeys(12)
	beat := func(id, mode, n string) []any {
		t.Helper()
		v, err := c.eval("HEARTBEAT", fleet, id, mode, "1700000000000 0 "+n, "2000", "60000", "30000", "180000", "", "")
		a, _ := v.([]any)
		if err != nil || len(a) != 12 {
			t.Fatalf("Heartbeat %s = %s, %v; want 12 entries", id, show(a), err)
		}
		return a
	}
	beat("a", "redis", "0")
	beat("b", "redis", "2")
	beat("c", "redis", "3")
	beat("b", "local", "2")
	beat("c", "local", "3")
	if r, want := beat("a", "redis", "3"), "[*, 1, 2, 0, 3, [1, 2], [], 3, *, [], \"2\", [2, 3]]"; !matches(r, mustReply(t, want)) {
		t.Errorf("Heartbeat beside members pacing on 2 and 3 = %s, want %s", show(r), want)
	}
	beat("c", "local", "2")
	if r, want := beat("a", "redis", "3"), "[*, 1, 2, 0, 3, [1, 2], [], 2, *, [], \"2\", [2]]"; !matches(r, mustReply(t, want)) {
		t.Errorf("Heartbeat beside members pacing on 2 = %s, want %s", show(r), want)
	}
	beat("b", "redis", "3")
	beat("c", "local", "0")
	if r, want := beat("a", "redis", "3"), "[*, 2, 1, 0, 3, [2], [], 0, *, [], \"2\", []]"; !matches(r, mustReply(t, want)) {
		t.Errorf("Heartbeat beside a member without a share = %s, want %s", show(r), want)
	}
}

// TestConformanceHeartbeat: the 12-entry reply, the member recorded in the
// fleet's keys, the format each member is told (P{limiters}:format: absent
// is 2) and recorded as writing, the highest format it reads (the ninth
// key: a member of the release before passes eight, and records none), and
// leave (docs/protocol.md: Heartbeat, Keys, Versions).
func TestConformanceHeartbeat(t *testing.T) {
	c := newConn(t)
	fleet := c.fleetKeys(12)
	beatOn := func(keys []string, id, mode, deadline string, more ...string) ([]any, error) {
		// suspect_ms 30000: "before" tells the last change of the fleet's
		// size for 60 s, longer than the test takes.
		args := append([]string{id, mode, "1700000000000 0 0", "2000", "60000", "30000", "180000", "", deadline}, more...)
		v, err := c.eval("HEARTBEAT", keys, args...)
		a, _ := v.([]any)
		return a, err
	}
	beat := func(id, mode, deadline string, more ...string) ([]any, error) {
		return beatOn(fleet, id, mode, deadline, more...)
	}
	now, _ := c.do("TIME")
	nowMS := func() int64 { s, _ := strconv.ParseInt(now.([]any)[0].(string), 10, 64); return s * 1000 }()
	c.volatile(nowMS, "{ms}")
	r, err := beat("w1", "redis", "", "api", strconv.FormatInt(nowMS, 10)+" 1 permits permits b 10 2")
	if err != nil || len(r) != 12 {
		t.Fatalf("Heartbeat = %s, %v; want 12 entries", show(r), err)
	}
	if want := "[*, 1, 0, 0, 1, [], [], 0, 0, [], \"2\", []]"; !matches(r, mustReply(t, want)) {
		t.Errorf("Heartbeat = %s, want %s", show(r), want)
	}
	r, _ = beat("w2", "local", "")
	if want := "[*, 2, 0, 1, 2, [], [], 0, 1, [], \"2\", []]"; !matches(r, mustReply(t, want)) {
		t.Errorf("second member's Heartbeat = %s, want %s", show(r), want)
	}
	r, _ = beat("w1", "redis", "")
	if want := "[*, 1, 1, 0, 2, [1], [], 0, 1, [], \"2\", []]"; !matches(r, mustReply(t, want)) {
		t.Errorf("Heartbeat beside a member pacing locally = %s, want %s", show(r), want)
	}
	// A member of the release before: eight keys, nothing in :reads.
	if r, err = beatOn(fleet[:8], "w3", "redis", ""); err != nil || len(r) != 12 || r[10] != "2" {
		t.Errorf("Heartbeat with eight keys = %s, %v; want 12 entries, format 2", show(r), err)
	}
	for _, q := range []struct {
		cmd  []any
		want string
	}{
		{[]any{"HGET", fleet[1], "w1"}, `"redis 1700000000000 0 0"`},
		{[]any{"HGET", fleet[1], "w2"}, `"local 1700000000000 0 0"`},
		{[]any{"ZRANGEBYSCORE", fleet[3], "1", "1"}, `["w2"]`},
		{[]any{"HGET", fleet[7], "w1"}, `"2"`},
		{[]any{"HGET", fleet[7], "w3"}, `"2"`},
		{[]any{"HGET", fleet[8], "w1"}, `"3"`},
		{[]any{"HGET", fleet[8], "w2"}, `"3"`},
		{[]any{"HEXISTS", fleet[8], "w3"}, `0`},
		{[]any{"ZCARD", fleet[0]}, `3`},
		{[]any{"HGET", fleet[2], "api"}, fmt.Sprintf(`"%d 1 permits permits b 10 2"`, nowMS)},
	} {
		got, err := c.do(q.cmd...)
		if err != nil || !matches(got, mustReply(t, q.want)) {
			t.Errorf("%v = %s, %v; want %s", q.cmd, show(got), err, q.want)
		}
	}
	for _, k := range []string{fleet[0], fleet[1], fleet[3], fleet[7], fleet[8]} {
		// Renewed to hold_ms + hold_ms / 4 at least every hold_ms / 4:
		// the records outlive the last heartbeat by hold_ms at least.
		if p, _ := c.do("PTTL", k); p.(int64) <= 60000-1000 || p.(int64) > 75000 {
			t.Errorf("PTTL %s = %v, want in (hold_ms, hold_ms * 5/4]", k, p)
		}
	}
	// The operator's setting: each member is told it, and recorded
	// writing it; anything but "1" and "3" is format 2.
	for _, f := range []struct{ set, want string }{{"1", "1"}, {"3", "3"}, {"2", "2"}, {"4", "2"}} {
		c.do("SET", fleet[6], f.set)
		if r, _ = beat("w1", "redis", ""); show(r[10]) != `"`+f.want+`"` {
			t.Errorf("Heartbeat with the format set to %s tells %s, want %s", f.set, show(r[10]), f.want)
		}
		if got, _ := c.do("HGET", fleet[7], "w1"); got != f.want {
			t.Errorf("format %s: writes[w1] = %v, want %s", f.set, got, f.want)
		}
	}
	c.do("DEL", fleet[6])
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
	for _, k := range []string{fleet[1], fleet[7], fleet[8]} {
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
// page's examples, in the three formats, and refuses what the grammar and
// format 3's table do not allow.
func TestStateGrammar(t *testing.T) {
	hex := func(s string) string {
		b, err := hexDecode(s)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, s := range []string{
		"1700000000000000 7000 5 0 2000000000 2000000000",
		"1700000000200000 8000 5 3000000000 permits 3000000000 800000000 ~p 5 800000000",
		"1700000000500000 7700 6 c0 permits 1500000000 1500000000 ~s 5:6 2200000000",
		"1700000000000000 6402000 3 0 rps 2000000250 2100000250 tps 2100000250 2100000250 daily w19675 3",
		"1700000000000000 2000 1 0 permits -50000000.500 0 ~p 0 0 ~l 250000000 2",
		"1 1700000000000000 6402000000000 3 0.000 0 rps 2000000250.000 2100000250.000 tps 2100000250.000 2100000250.000 daily 19675 3",
		"1 1700000000000000 7000000000 5 0.000 1 permits 2000000000.000 2000000000.000 ~p 5 0.000",
		hex("b000401e18240a06b80b000001000000006cca88ffff000000000000"),
		hex("a000401e18240a06881303"),
		hex("a100401e18240a06881303"),
		hex("b000401e18240a06881300000400000000ca9a3b000000ca9a3b0000"),
		hex("d000401e18240a06d0af61000000030000000000000000000000000020727073203230303030303032353020323130303030303235302074707320323130303030303235302032313030303030323530206461696c79207731393637352033207e65207270732032303030303030323530"),
		"\xd1" + strings.Repeat("\x00", 27),                      // the general form with no record
		"\xc0" + strings.Repeat("\x00", 17) + doubles(0.5, 1.25), // z, e as doubles
	} {
		if _, err := parseState(s); err != nil {
			t.Errorf("parseState: %v", err)
		}
	}
	if st, err := parseState(hex("a100401e18240a06881303")); err != nil || !st.stored || st.format != 3 || st.seq != 3 || st.x != 5000 || st.t != t0 {
		t.Errorf("parseState of the form 0xA1 = %+v, %v; want format 3, t %d, x 5000, s 3, the flag", st, err, t0)
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
		"\x9f" + strings.Repeat("\x00", 10),
		"\xa0" + strings.Repeat("\x00", 9),
		"\xb0" + strings.Repeat("\x00", 28),
		"\xc0" + strings.Repeat("\x00", 32),
		"\xd0" + strings.Repeat("\x00", 26),
		"\xd0" + strings.Repeat("\x00", 27) + "permits 1 2", // no space before the records
		"\xd0" + strings.Repeat("\x00", 27) + " ~q 1 2",
		"\xe0" + strings.Repeat("\x00", 27),
	} {
		if st, err := parseState(s); err == nil {
			t.Errorf("parseState(%s) = %+v, want an error", show(s), st)
		}
	}
	if st, err := parseState("1700000000000000 2000 1 c0 0 0"); err != nil || !st.stored {
		t.Errorf("parseState of a state with the flag c = %+v, %v", st, err)
	}
}

// TestConformanceCalendar: a calendar window (kind "c") takes its windows
// from the table ARGV[2] carries ("c<spec>=<i0>:<b0>:<len>*<count>,..."),
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
	const daily = "1 requests 1 daily 1 c 3 day:America/Los_Angeles"
	args := func(now int64, cal string, m int) []string {
		return append([]string{"", clock(now, 0) + cal + "1", daily}, requests(m, -1, 1)...)
	}
	// 2026-03-08 23:59:59.5 in Los Angeles; the next day starts 0.5 s later.
	r := c.reserve("cal", args(1773039599500000, table, 5)...)
	if !slices.Equal(r.waits, []int64{0, 0, 0, 500_000_000, 500_000_000}) || !slices.Equal(r.bands, []string{"~", "~", "~", "daily", "daily"}) {
		t.Fatalf("5 requests at 23:59:59.5: waits %v bands %q, want 3 now and 2 at midnight, set by daily", r.waits, r.bands)
	}
	st := c.parse(r.state)
	if d, _ := st.band("daily"); !d.window || d.w != 20521 || d.u != 2 {
		t.Errorf("state %s: want daily w20521 2 (the day after, its ordinal)", show(r.state))
	}
	before := c.get(c.key("cal", ""))
	// Without the table, or with one that starts after now: refused.
	for _, tc := range []struct {
		now       int64
		cal, code string
	}{
		{1773039599500000, "", "PACER_CALENDAR"},
		{1773039599500000, "cday:UTC=20519:1772870400000000:86400000000*4 ", "PACER_CALENDAR"},
		{1772870399999999, table, "PACER_ARG"},
		{1773039599500000, "cday:America/Los_Angeles=20519:1772870400000000:0*1 ", "PACER_ARG"},
		{1773039599500000, "cday:America/Los_Angeles=x ", "PACER_ARG"},
	} {
		_, err := c.eval("RESERVE", c.reserveKeys("cal"), args(tc.now, tc.cal, 1)...)
		if err == nil || !strings.HasPrefix(err.Error(), tc.code+" ") {
			t.Errorf("now %d tables %q: error %v, want %s", tc.now, tc.cal, err, tc.code)
		}
		if got := c.get(c.key("cal", "")); got != before {
			t.Errorf("a refused call changed the state: %s, was %s", show(got), show(before))
		}
	}
	// On 2026-03-10 (window 20522, the table's last: its last boundary
	// ends it): three now, and the fourth would go past the table:
	// refused as a queue too long (-1).
	r = c.reserve("cal2", args(1773130000000000, table, 4)...)
	if !slices.Equal(r.seqs, []int64{1, 2, 3, -1}) || !slices.Equal(r.waits, []int64{0, 0, 0, 0}) {
		t.Errorf("4 requests on the table's last day: waits %v seqs %v, want 3 now, the last -1", r.waits, r.seqs)
	}
	// A stored limit's calendar band: refused without its table, enforced
	// with it.
	if _, err := c.do("SET", c.key("cal3", ":limit"), "enforce 1 daily requests c 1 day:America/Los_Angeles"); err != nil {
		t.Fatal(err)
	}
	bucket := []string{"", clock(1773039599500000, 0) + "1", "1 requests 1 rps 1 b 100 100"}
	if _, err := c.eval("RESERVE", c.reserveKeys("cal3"), append(slices.Clone(bucket), requests(1, -1, 1)...)...); err == nil || !strings.HasPrefix(err.Error(), "PACER_CALENDAR day:America/Los_Angeles ") {
		t.Errorf("a stored calendar band without its table: %v, want PACER_CALENDAR day:America/Los_Angeles", err)
	}
	bucket[1] = clock(1773039599500000, 0) + table + "1"
	r = c.reserve("cal3", append(bucket, requests(2, -1, 1)...)...)
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
	lim := common(0, 0, "1", limit(1000, 3))
	// Two tenants, one request each, in one call: both booked, a slot
	// interval apart (the burst of 3 lets both go now).
	got, err := c.eval("FAIR", c.fairKeys("good"), append(slices.Clone(lim), "2 1 0 0 1 0 1 0 w 1", "a", "2 1 0 0 1 0 1 0 w", "b", "", doubles(-1, 1, -1, 1))...)
	if err != nil {
		t.Fatal(err)
	}
	if r := c.decode(got); !slices.Equal(r.seqs, []int64{1, 2}) {
		t.Errorf("two tenants' batches: %s, want seq 1 and 2", show(decodeReserve(t, got)))
	}
	nan := math.NaN()
	for i, args := range [][]string{
		{"2 1 0 0 1 0 1 0 w 1", "a", "2 1 0 0 1 0 1 0 w", "b", "", doubles(-1, 1, -1, -1)},    // a bad cost in the second batch
		{"2 1 0 0 1 0 1 0 w 1", "a", "2 1 0 0 1 0 1 0 w", "b", "", doubles(-1, 1, nan, 1)},    // a bad max wait there
		{"2 1 0 0 1 0 1 0 w 1", "a", "2 1 0 0 1 0 1 0 w", "b", "", doubles(-1, 1, -1, 9)},     // a cost above the burst
		{"2 1 0 0 1 0 1 0 w 2", "a", "2 1 0 0 1 0 1 0 w", "b", "", doubles(-1, 1, -1, 1)},     // no request left for b
		{"2 1 0 0 1 0 1 0 w 0", "a", "2 1 0 0 1 0 1 0 w", "b", "", doubles(-1, 1, -1, 1)},     // an empty batch
		{"2 1 0 0 1 0 1 0 w 1", "a", "2 0 0 0 1 0 1 0 w", "b", "", doubles(-1, 1, -1, 1)},     // a bad weight in the second pair
		{"2 1 0 0 1 0 1 0 w 1", "a", "2 1 0 0 1 0 1 0 w", "b", "", doubles(-1, 1, -1, 1, -1)}, // requests not a whole number of requests' doubles
	} {
		k := fmt.Sprintf("badgroups:%d", i)
		_, err := c.eval("FAIR", c.fairKeys(k), append(slices.Clone(lim), args...)...)
		if want := "PACER_ARG"; i == 2 {
			if code(err) != "PACER_EXCEEDS" {
				t.Errorf("case %d: %v, want PACER_EXCEEDS", i, err)
			}
		} else if code(err) != want {
			t.Errorf("case %d: %v, want %s", i, err, want)
		}
		for _, key := range c.fairKeys(k) {
			if n, _ := c.do("EXISTS", key); n != int64(0) {
				t.Errorf("case %d wrote %s", i, key)
			}
		}
	}
}

// hexDecode returns the bytes a hex string writes.
func hexDecode(s string) (string, error) {
	b, err := hex.DecodeString(s)
	return string(b), err
}

// TestConformancePlainRequests: Reserve's requests "<m>" (lua/reserve.lua:
// m >= 2, up to four digits) are m plain requests, cost 1 on every unit
// and no maximum wait: the same replies and states, byte for byte, as the
// m requests written out as doubles, on a Limit and on a policy of two
// units. Anything else of four bytes or fewer that is not "", "0" or such
// digits is no whole number of requests: PACER_ARG, nothing written, on
// the client's clock (core.lua) and on the server's (fast.lua's way for a
// Limit).
func TestConformancePlainRequests(t *testing.T) {
	c := newConn(t)
	for i, pol := range []struct {
		policy string
		ones   []float64
	}{{limit(10, 3), []float64{-1, 1}}, {threeBands, []float64{-1, 1, 1}}} {
		for _, m := range []int{2, 3, 7} {
			a, b := fmt.Sprintf("plain:%d:%d:a", i, m), fmt.Sprintf("plain:%d:%d:b", i, m)
			var v []float64
			for range m {
				v = append(v, pol.ones...)
			}
			for _, us := range []int64{0, 250_000} {
				ra := c.mustEval("RESERVE", c.reserveKeys(a), append(common(us, 0, "1", pol.policy), "", strconv.Itoa(m))...)
				rb := c.mustEval("RESERVE", c.reserveKeys(b), append(common(us, 0, "1", pol.policy), "", doubles(v...))...)
				if ra != rb || len(c.decode(ra).seqs) != m {
					t.Errorf("policy %d: %d plain requests at %d µs: %s; as doubles: %s", i, m, us, show(decodeReserve(t, ra)), show(decodeReserve(t, rb)))
				}
				if sa, sb := c.get(c.key(a, "")), c.get(c.key(b, "")); sa != sb {
					t.Errorf("policy %d: %d plain requests: state %s; as doubles: %s", i, m, show(sa), show(sb))
				}
			}
		}
	}
	for _, reqs := range []string{"1", "1e1", " 2", "2 ", "0x2", "2.0", "-2", "+2", "12345", "2\x00"} {
		for _, env := range []string{clock(t0, 0) + "1", "1"} {
			k := fmt.Sprintf("plainbad:%x:%d", reqs, len(env))
			if _, err := c.eval("RESERVE", c.reserveKeys(k), "", env, limit(10, 3), "", reqs); code(err) != "PACER_ARG" {
				t.Errorf("requests %q (ARGV[2] %q): %v, want PACER_ARG", reqs, env, err)
			}
			if got := c.get(c.key(k, "")); got != "" {
				t.Errorf("requests %q (ARGV[2] %q) wrote %s", reqs, env, show(got))
			}
		}
	}
}

// fleetSuffixes are the fleet's keys after the first (docs/protocol.md,
// Heartbeat: KEYS[2...12]).
var fleetSuffixes = []string{":info", ":policies", ":ids", ":checked", ":policies:at", ":format", ":writes", ":reads", ":x:w", ":x:local", ":x:holes"}

// TestConformanceFairLapsed: a tenant whose request was deferred waits
// until grace after the time it was told to ask again; past that, the next
// call of the lane drops its waiting and books another tenant's request
// at once (docs/protocol.md: Fair; lua/fair.lua's least_waiting).
func TestConformanceFairLapsed(t *testing.T) {
	c := newConn(t)
	keys := c.fairKeys("lapsed")
	waiting := c.key("lapsed", ":fw:n")
	lim := limit(10, 1) // a slot every 100 ms
	// a's three requests at t0: booked now and 100 ms on, the third deferred.
	r := c.decode(c.mustEval("FAIR", keys, append(common(0, 0, "1", lim), "2 1 0 0 1 0 3 0 w", "a", "", doubles(-1, 1, -1, 1, -1, 1))...))
	if !slices.Equal(r.seqs, []int64{1, 2, -3}) {
		t.Fatalf("a's three requests: seq %v, want 1, 2 and -3 (deferred)", r.seqs)
	}
	if n, _ := c.do("ZCARD", waiting); n != int64(1) {
		t.Fatalf("after a's deferred request, %v tenants wait in the Normal lane, want 1", n)
	}
	// 2 s on, a has not asked again: b's request drops a's waiting, which
	// lapsed, and is booked at once.
	r = c.decode(c.mustEval("FAIR", keys, append(common(2_000_000, 0, "1", lim), "2 1 0 0 1 0 1 0 w", "b", "", doubles(-1, 1))...))
	if !slices.Equal(r.seqs, []int64{3}) || r.waits[0] != 0 {
		t.Errorf("b's request behind a lapsed a: seq %v wait %v, want 3, booked now", r.seqs, r.waits)
	}
	if n, _ := c.do("ZCARD", waiting); n != int64(0) {
		t.Errorf("after b's request, %v tenants wait in the Normal lane, want none (a lapsed)", n)
	}
}

// TestConformanceFairExpiryOfTheCall: the fair keys of a call of several
// batches live as long as its longest-lived batch needs (10 s, plus the
// time it was told to ask again, plus grace), whatever the order of the
// batches. Before, each batch set the keys' expiry in turn, and the last
// one's overwrote the others': here b's (10 s), though a was told to ask
// again 10 s on and waits until then (docs/protocol.md: Fair).
func TestConformanceFairExpiryOfTheCall(t *testing.T) {
	c := newConn(t)
	keys := c.fairKeys("expiry")
	lim := limit(0.1, 1) // a slot every 10 s
	// a, in the Batch lane (booked only when due): its first request now,
	// its second deferred 10 s. b, in the Normal lane: booked 10 s on.
	r := c.decode(c.mustEval("FAIR", keys, append(common(0, 0, "1", lim),
		"3 1 0 0 1 0 2 0 w 2", "a", "2 1 0 0 1 0 1 0 w", "b", "", doubles(-1, 1, -1, 1, -1, 1))...))
	if !slices.Equal(r.seqs, []int64{1, -3, 2}) {
		t.Fatalf("seq %v, want 1, -3 (a's second, deferred) and 2 (b's)", r.seqs)
	}
	for _, k := range []string{":fair", ":fw:b", ":fx"} {
		ttl, err := c.do("PTTL", c.key("expiry", k))
		if err != nil {
			t.Fatal(err)
		}
		if ms, _ := ttl.(int64); ms < 15_000 {
			t.Errorf("%s expires in %v ms, want a's 20 s (10 s idle and its 10 s to ask again)", k, ttl)
		}
	}
}

// TestConformanceClaimStale: a hold claimed after it went stale is dropped
// and a fresh slot taken in its place (origin 2); a reservation cancelled
// with its hold deletes the hold (docs/protocol.md: Claim, Hold, Adjust).
func TestConformanceClaimStale(t *testing.T) {
	c := newConn(t)
	lim := limit(10, 1) // a slot every 100 ms
	keys := func(holder string) []string {
		return []string{c.key("cs", ""), c.key("cs", ":limit"), c.key("cs", ":h:"+holder)}
	}
	// a's hold at t0, stale 1 s after its slot.
	if _, err := c.eval("HOLD", keys("a"), append(common(0, 0, "1", lim), "1000000", "0", "1", "1")...); err != nil {
		t.Fatal(err)
	}
	if c.get(c.key("cs", ":h:a")) == "" {
		t.Fatal("HOLD recorded no hold for a")
	}
	// 5 s on, a claims: the hold is stale, dropped, and a fresh slot
	// handed over (state 1, origin 2).
	v := c.mustEval("CLAIM", keys("a"), append(common(5_000_000, 0, "1", lim), "1000000", "1", "1000000", "0", "1")...)
	r, _ := v.([]any)
	if len(r) < 6 || r[4] != int64(1) || r[5] != int64(2) {
		t.Errorf("CLAIM of a stale hold: %v, want state 1 (handed over), origin 2 (fresh after dropping a stale hold)", show(v))
	}
	if h := c.get(c.key("cs", ":h:a")); h != "" {
		t.Errorf("after the claim, a's stale hold is still there: %q", h)
	}
	// b's hold, kept 100 ms on (state 2), then its reservation cancelled
	// with the hold: the hold goes.
	v = c.mustEval("CLAIM", keys("b"), append(common(5_000_000, 0, "1", lim), "0", "1", "1000000", "0", "1")...)
	r, _ = v.([]any)
	if len(r) < 6 || r[4] != int64(2) {
		t.Fatalf("CLAIM for b 100 ms away with may_keep: %v, want state 2 (kept)", show(v))
	}
	seq := fmt.Sprint(r[3])
	slot := t0 + 5_000_000 + r[2].(int64)/1000
	if _, err := c.eval("ADJUST", append(keys("b")[:2], c.key("cs", ":done"), c.key("cs", ":h:b")),
		append(common(5_000_000, 0, "1", lim), "cancel", strconv.FormatInt(slot, 10), "0", seq, "1")...); err != nil {
		t.Fatal(err)
	}
	if h := c.get(c.key("cs", ":h:b")); h != "" {
		t.Errorf("after the cancel with b's hold, the hold is still there: %q", h)
	}
}

// TestConformanceResumeWindows: a pause on a policy with a window band
// records each window band's latest window holding units ("~w"); a
// resume moves a window's queue that fills more than the window the pause
// ends in by whole windows, into none holding a call granted before the
// pause (docs/protocol.md: The state, Resume).
func TestConformanceResumeWindows(t *testing.T) {
	c := newConn(t)
	// 10 requests per second (burst 1) and 12 per 2 s window.
	pol := "1 requests 2 rps 1 b 10 1 win 1 w 12 2000000:0"
	k := c.reserveKeys("rw")
	c.reserve("rw", append(common(0, 0, "1", pol), requests(1, -1, 1)...)...) // window 0
	c.mustEval("PAUSE", k[:2], append(common(300_000, 0, "1", pol), "11000000")...)
	st := c.parse(c.get(k[0]))
	var w *record
	for i := range st.recs {
		if st.recs[i].name == "~w" {
			w = &st.recs[i]
		}
	}
	// The window of reservation 1, the latest holding units.
	if w == nil || w.f1 != "1" || w.f2 != fmt.Sprintf("win:%d", t0/2_000_000) {
		t.Fatalf("paused state %q: want a record ~w 1 win:W (after reservation 1, its window W)", c.get(k[0]))
	}
	// 40 behind the pause (its end at 11.3 s, in window 5): windows 5 to 8.
	r := c.reserve("rw", append(common(400_000, 0, "1", pol), requests(40, -1, 1)...)...)
	if last := r.waits[39]/1000 + 400_000; last < 16_000_000 {
		t.Fatalf("the queue's last slot at %d µs: want in window 8", last)
	}
	// Resumed at 1 s: the queue moves 4 windows, to 1 to 4, after window 0.
	v := c.mustEval("RESUME", k[:2], common(1_000_000, 0, "1", pol)...)
	if show(v) != show([]any{t0 + 1_000_000, int64(0), int64(10_300_000_000), int64(8_000_000_000)}) {
		t.Errorf("Resume = %s, want the pause's 10.3 s left and d 8 s (4 windows)", show(v))
	}
	st = c.parse(c.get(k[0]))
	if b, ok := st.band("win"); !ok || b.w != t0/2_000_000+4 {
		t.Errorf("resumed state %q: want the window record moved to window 4", c.get(k[0]))
	}
}
