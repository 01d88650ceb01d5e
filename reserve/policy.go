package reserve

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// A Policy is the set of limits every call on a key must satisfy at once:
// requests per second and tokens per minute, an hourly quota beside a
// per-second rate. Each limit is a Band, and each band charges one unit of
// a call's Cost. A reservation gets one slot, the earliest at which every
// band allows it, reserved on all bands in one atomic step.
//
// A single Limit is the one-band case: Limit.Policy returns it, and
// Single(key, lim, n) is the Request of that policy and Permits(n).
type Policy []Band

// A Band is one limit of a Policy: a token bucket (Limit), a fixed-window
// quota (Window) or a concurrency limit (InFlight), exactly one of the
// three, charging the Cost's amount for Unit.
type Band struct {
	// Name identifies the band in its policy (Peek, errors, a stored
	// limit); unique within the policy. Letters, digits, '.', '_' and '-'.
	Name string
	// Unit is the cost unit the band charges ("requests", "tokens",
	// "points"). Default: Name. Several bands may charge one unit (a
	// per-minute rate and a daily quota of requests).
	Unit string
	// Limit makes the band a token bucket: Rate units per second, at most
	// Burst units at once.
	Limit Limit
	// Window makes the band a fixed-window quota.
	Window Window
	// InFlight makes the band a concurrency limit: at most InFlight units
	// of calls open at once, fleet-wide (GitHub's 100 concurrent requests,
	// an LLM's open streams, a host's connections). A call takes its
	// seats (its Cost's whole amount for Unit) before its slot on the
	// other bands, waiting in the key's queue, in order, for seats to be
	// given back, and holds them until it ends: Reservation.Done, Settle
	// or Cancel. Only ReserveN, TryReserveN and Acquire take such a
	// policy; a policy has at most one in-flight band. See docs/design.md,
	// "In-flight bands".
	InFlight int
}

// A Window is a fixed-window quota: at most N units in each window of
// length Length. Windows are aligned to Origin: [Origin + i*Length,
// Origin + (i+1)*Length). The zero Origin is the Unix epoch, so windows of a
// minute, an hour or a day start on whole UTC minutes, hours and days; give
// the provider's reset time instead when its windows start elsewhere.
// Length and Origin count in whole microseconds (finer parts are dropped).
// A window quota is exact and bursty: all N units may go at the start of a
// window, right after the N of the window before.
//
// With Calendar set, the windows are instead the calendar periods of a time
// zone (Location; nil is UTC): its days, ISO weeks (from Monday 00:00) or
// months, each from its local midnight, exact across daylight-saving
// changes (days of 23 and 25 hours) and month lengths. Length and Origin
// must then be zero. Redis's clock still says which period is current;
// each call carries the zone's period boundaries around now, computed from
// the caller's tz database (see docs/protocol.md).
type Window struct {
	N      float64
	Length time.Duration
	Origin time.Time
	// Calendar makes the windows the zone's calendar periods: Day, Week
	// or Month. Zero: fixed windows of Length.
	Calendar Period
	// Location is the zone of Calendar's periods; nil means UTC. Its name
	// (Location.String) is what other processes load, so it must be a tz
	// database name (time.LoadLocation), not time.Local.
	Location *time.Location
}

// A Period is a calendar window's period (Window.Calendar).
type Period int

// The calendar periods.
const (
	Day   Period = iota + 1 // from local midnight to the next
	Week                    // an ISO week, from Monday 00:00
	Month                   // from the first of the month, 00:00
)

// String returns "day", "week" or "month".
func (p Period) String() string {
	switch p {
	case Day:
		return "day"
	case Week:
		return "week"
	case Month:
		return "month"
	}
	return "Period(" + strconv.Itoa(int(p)) + ")"
}

// ParsePeriod returns the Period named "day", "week" or "month".
func ParsePeriod(s string) (Period, error) {
	for _, p := range []Period{Day, Week, Month} {
		if s == p.String() {
			return p, nil
		}
	}
	return 0, fmt.Errorf("%w: calendar period %q (want day, week or month)", ErrInvalidWindow, s)
}

// A Cost is what one call charges, per unit: Cost{"requests": 1, "tokens":
// 1200}. A reservation must give an amount for every unit its policy's bands
// charge (0 to charge nothing); Settle may give only the units whose actual
// amount differs.
type Cost map[string]float64

// PermitsUnit is the unit of a single Limit's band (Limit.Policy).
const PermitsUnit = "permits"

// Permits returns the Cost of n permits on a single Limit.
func Permits(n int) Cost { return Cost{PermitsUnit: float64(n)} }

// Policy returns l as a one-band policy, charging PermitsUnit.
func (l Limit) Policy() Policy { return Policy{{Name: PermitsUnit, Limit: l}} }

// keyOnly is the spec of a call that names no policy (Pause): the scripts
// and the engine then work on the key's records alone (no band: the
// policy argument "").
var keyOnly = &spec{units: []string{PermitsUnit}, policyArg: "", policyAny: "", sig: "0"}

// spec is a Policy checked and compiled for the scripts and the local
// fallback. It is immutable and shared.
type spec struct {
	units     []string // the cost units, in the order costs are sent
	bands     []bandSpec
	policyArg string      // the policy as the scripts read it (core.lua's ARGV[3])
	policyAny any         // policyArg in an interface, made once: every call sends it
	stored    string      // the policy in the stored limit's form (storedText)
	sig       string      // the policy's encoding: equal specs, equal sig
	cals      []*calendar // the calendar windows' zones and periods (their tables go with each call)
	single    bool        // one bucket band charging PermitsUnit (a Limit)
}

type bandSpec struct {
	name   string
	unit   int // index into units
	bucket bool
	rate   float64 // bucket
	burst  float64
	n      float64       // window
	length time.Duration // a calendar window's: its period's nominal length
	origin time.Time
	cal    *calendar // a calendar window
}

// maxWindow bounds a window's length, as maxFill bounds a bucket's, and
// maxWindowN its N: units are kept as doubles, exact integers below 2^53.
const (
	maxWindow  = maxFill
	maxWindowN = 1e15
)

// validName reports whether a band name is made of letters, digits, '.',
// '_' and '-' (the scripts separate fields with spaces and ':').
func validName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// compile checks p and compiles it. Errors match ErrInvalidPolicy, or for
// a bucket band ErrInvalidRate, ErrInvalidBurst or ErrInvalidLimit, or for
// a window band ErrInvalidWindow.
func (p Policy) compile() (*spec, error) {
	if len(p) == 0 {
		return nil, fmt.Errorf("%w: no bands", ErrInvalidPolicy)
	}
	s := &spec{bands: make([]bandSpec, len(p))}
	names := make(map[string]bool, len(p))
	unitIndex := make(map[string]int, len(p))
	var sig strings.Builder
	for i, b := range p {
		if !validName(b.Name) {
			return nil, fmt.Errorf("%w: band name %q (want letters, digits, '.', '_' or '-')", ErrInvalidPolicy, b.Name)
		}
		if names[b.Name] {
			return nil, fmt.Errorf("%w: two bands named %q", ErrInvalidPolicy, b.Name)
		}
		names[b.Name] = true
		unit := b.Unit
		if unit == "" {
			unit = b.Name
		}
		if !validName(unit) {
			return nil, fmt.Errorf("%w: band %q: unit %q (want letters, digits, '.', '_' or '-')", ErrInvalidPolicy, b.Name, unit)
		}
		u, ok := unitIndex[unit]
		if !ok {
			u = len(s.units)
			unitIndex[unit] = u
			s.units = append(s.units, unit)
		}
		if b.InFlight != 0 {
			return nil, fmt.Errorf("%w: band %q is an in-flight band: take it with Limiter.Acquire, ReserveN or TryReserveN, and end the call with Reservation.Done (Wait, WaitN, Allow, AllowN, Peek, package hold and stored limits do not take one)", ErrInvalidPolicy, b.Name)
		}
		isBucket, isWindow := b.Limit != (Limit{}), b.Window != (Window{})
		bs := bandSpec{name: b.Name, unit: u, bucket: isBucket}
		switch {
		case isBucket == isWindow:
			return nil, fmt.Errorf("%w: band %q needs exactly one of Limit and Window", ErrInvalidPolicy, b.Name)
		case isBucket:
			if err := b.Limit.Validate(); err != nil {
				return nil, fmt.Errorf("band %q: %w", b.Name, err)
			}
			bs.rate, bs.burst = b.Limit.Rate, float64(b.Limit.Burst)
			fmt.Fprintf(&sig, "%s %s b %s %d;", b.Name, unit, formatFloat(bs.rate), b.Limit.Burst)
		default:
			w := b.Window
			if math.IsNaN(w.N) || math.IsInf(w.N, 0) || w.N < 1 || w.N > maxWindowN {
				return nil, fmt.Errorf("%w: band %q: N %v (want 1 to %g)", ErrInvalidWindow, b.Name, w.N, float64(maxWindowN))
			}
			if w.Calendar != 0 || w.Location != nil {
				c, err := calendarOf(w)
				if err != nil {
					return nil, fmt.Errorf("band %q: %w", b.Name, err)
				}
				bs.n, bs.cal, bs.length = w.N, c, c.period.nominal()
				fmt.Fprintf(&sig, "%s %s c %s %s;", b.Name, unit, formatFloat(bs.n), c.spec)
				s.cals = append(s.cals, c)
				break
			}
			if w.Length < time.Microsecond || w.Length > maxWindow {
				return nil, fmt.Errorf("%w: band %q: length %v (want 1µs to %v)", ErrInvalidWindow, b.Name, w.Length, maxWindow)
			}
			bs.n, bs.length, bs.origin = w.N, w.Length.Truncate(time.Microsecond), w.Origin.Truncate(time.Microsecond)
			if w.Origin.IsZero() {
				bs.origin = time.Unix(0, 0)
			}
			fmt.Fprintf(&sig, "%s %s w %s %d:%d;", b.Name, unit, formatFloat(bs.n), bs.length.Microseconds(), bs.originMod())
		}
		s.bands[i] = bs
	}
	s.sig = sig.String()
	s.single = len(s.bands) == 1 && s.bands[0].bucket && s.units[0] == PermitsUnit
	s.policyArg = policyArg(s)
	s.policyAny = s.policyArg
	s.stored = s.storedForm()
	return s, nil
}

// policyArg returns s's policy as the scripts read it (core.lua's ARGV[3]):
// a Limit (one bucket band named and charging PermitsUnit) as "L" and its
// rate and burst, two little-endian doubles (struct "<dd"); any other
// policy as text: the number of units, their names, the number of bands,
// then each band's name, unit (1-based), kind and fields.
func policyArg(s *spec) string {
	if s.single && s.bands[0].name == PermitsUnit {
		b := make([]byte, 17)
		b[0] = 'L'
		binary.LittleEndian.PutUint64(b[1:], math.Float64bits(s.bands[0].rate))
		binary.LittleEndian.PutUint64(b[9:], math.Float64bits(s.bands[0].burst))
		return string(b)
	}
	f := make([]string, 0, 2+len(s.units)+5*len(s.bands))
	f = append(f, strconv.Itoa(len(s.units)))
	f = append(f, s.units...)
	f = append(f, strconv.Itoa(len(s.bands)))
	for _, b := range s.bands {
		kind, a, x := b.record()
		f = append(f, b.name, strconv.Itoa(b.unit+1), kind, a, x)
	}
	return strings.Join(f, " ")
}

// record returns the band's kind and fields as the scripts read them
// (core.lua's ARGV[5]).
func (b bandSpec) record() (kind, a, x string) {
	switch {
	case b.bucket:
		return "b", formatFloat(b.rate), formatFloat(b.burst)
	case b.cal != nil:
		return "c", formatFloat(b.n), b.cal.spec
	}
	return "w", formatFloat(b.n), strconv.FormatInt(b.length.Microseconds(), 10) + ":" + strconv.FormatInt(b.originMod(), 10)
}

// originMod is the window's origin modulo its length, in µs (what the
// scripts need to number windows).
func (b bandSpec) originMod() int64 {
	l := b.length.Microseconds()
	m := b.origin.UnixMicro() % l
	if m < 0 {
		m += l
	}
	return m
}

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// costs checks c against s and returns its amounts in s's unit order. Every
// unit must be given, none unknown; amounts are finite and >= 0, at least
// one positive, and none above the burst or N of a band charging it.
func (s *spec) costs(c Cost) ([]float64, error) {
	out := make([]float64, len(s.units))
	// In a fixed order (the map's is random): the error a bad cost gets
	// names the same unit every time, on every Limiter.
	for _, unit := range slices.Sorted(maps.Keys(c)) {
		v := c[unit]
		i := s.unitIndex(unit)
		if i < 0 {
			return nil, fmt.Errorf("%w: unit %q is charged by no band (the policy's units: %s)", ErrInvalidCost, unit, strings.Join(s.units, ", "))
		}
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return nil, fmt.Errorf("%w: %s %v (want a finite amount >= 0)", ErrInvalidCost, unit, v)
		}
		out[i] = v
	}
	positive := false
	for i, unit := range s.units {
		if _, ok := c[unit]; !ok {
			return nil, fmt.Errorf("%w: no amount for unit %q (give 0 to charge nothing)", ErrInvalidCost, unit)
		}
		if out[i] > 0 {
			positive = true
		}
	}
	if !positive {
		return nil, fmt.Errorf("%w: the cost charges nothing", ErrInvalidCost)
	}
	if err := s.fits(out); err != nil {
		return nil, err
	}
	return out, nil
}

// fits checks that no amount is above the burst or N of a band charging it:
// such a call could never be granted.
func (s *spec) fits(amounts []float64) error {
	for _, b := range s.bands {
		limit, what := b.burst, "burst"
		if !b.bucket {
			limit, what = b.n, "N"
		}
		if amounts[b.unit] > limit {
			return fmt.Errorf("%w: %s %v is above band %q's %s %v", ErrExceedsBurst, s.units[b.unit], amounts[b.unit], b.name, what, limit)
		}
	}
	return nil
}

func (s *spec) unitIndex(unit string) int {
	for i, u := range s.units {
		if u == unit {
			return i
		}
	}
	return -1
}

// cost turns amounts in s's unit order back into a Cost.
func (s *spec) cost(amounts []float64) Cost {
	c := make(Cost, len(s.units))
	for i, u := range s.units {
		c[u] = amounts[i]
	}
	return c
}

// spacing is the time a bucket band needs to refill amounts: the gap the
// slots of such calls keep between them. The smallest over the bands
// charged; zero if no bucket band is charged.
func (s *spec) spacing(amounts []float64) time.Duration {
	var least time.Duration
	for _, b := range s.bands {
		if !b.bucket || amounts[b.unit] <= 0 {
			continue
		}
		d := time.Duration(amounts[b.unit] / b.rate * float64(time.Second))
		if least == 0 || d < least {
			least = d
		}
	}
	return least
}

// slowest is the largest spacing of amounts over the bucket bands charged
// (see spacing); zero if none is.
func (s *spec) slowest(amounts []float64) time.Duration {
	var most time.Duration
	for _, b := range s.bands {
		if b.bucket && amounts[b.unit] > 0 {
			most = max(most, time.Duration(amounts[b.unit]/b.rate*float64(time.Second)))
		}
	}
	return most
}

// minLateness is the least lateness the defaults allow: finer than this,
// the scheduler's own jitter would make most sleepers late.
const minLateness = time.Millisecond

// lateness is the default of Options.MaxLateness and
// hold.Options.StaleAfter for amounts: half the slot spacing of the fastest
// bucket charged, at least minLateness; negative when no bucket is charged.
func (s *spec) lateness(amounts []float64) time.Duration {
	sp := s.spacing(amounts)
	if sp <= 0 {
		return -1
	}
	return max(sp/2, minLateness)
}

// windowEnd is the end of the earliest window, among the window bands
// charged, containing t; zero if none is charged.
func (s *spec) windowEnd(amounts []float64, t time.Time) time.Time {
	var end time.Time
	for _, b := range s.bands {
		if b.bucket || amounts[b.unit] <= 0 {
			continue
		}
		if b.cal != nil {
			if e := b.cal.end(t); end.IsZero() || e.Before(end) {
				end = e
			}
			continue
		}
		d := t.Sub(b.origin)
		i := d / b.length
		if d%b.length < 0 {
			i--
		}
		e := b.origin.Add((i + 1) * b.length)
		if end.IsZero() || e.Before(end) {
			end = e
		}
	}
	return end
}

func sortStrings(s []string) { sort.Strings(s) }
