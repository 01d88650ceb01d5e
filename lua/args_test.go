package lua_test

// ARGV of the scripts built on core.lua, for the tests that drive them on
// a client clock (share_test.go and the tests beside it): the common
// arguments (now_us, now_ns, the share, the units, k and k band records;
// core.lua's header, docs/protocol.md's "Common arguments") and the
// shares of ARGV[3].

import (
	"strconv"
	"strings"
)

// A band is one of ARGV[5]'s records: name, unit, kind, a, b.
type band struct {
	name string
	unit int    // 1-based index of the unit it charges in the policy's units
	kind string // "b" (bucket) or "w" (window)
	a, b string
}

// bucket is a token bucket band: rate units per second, burst units.
func bucket(name string, unit int, rate, burst float64) band {
	return band{name, unit, "b", ff(rate), ff(burst)}
}

// window is a fixed-window band: n units per window of lenUS µs, whose
// boundaries lie at originUS modulo lenUS.
func window(name string, unit int, n float64, lenUS, originUS int64) band {
	return band{name, unit, "w", ff(n), strconv.FormatInt(lenUS, 10) + ":" + strconv.FormatInt(originUS, 10)}
}

// A policy is a caller's units (ARGV[4]) and bands (ARGV[5...]).
type policy struct {
	units []string
	bands []band
}

// permits is a Limit's policy: one bucket named permits.
func permits(rate, burst float64) policy {
	return policy{[]string{"permits"}, []band{bucket("permits", 1, rate, burst)}}
}

// args returns ARGV[1..opi-1] at the client clock now (Unix ns) with share
// (ARGV[3]), then more, the operation's own arguments.
func (p policy) args(now int64, share string, more ...any) []any {
	a := make([]any, 0, 5+5*len(p.bands)+len(more))
	a = append(a, strconv.FormatInt(now/1000, 10), strconv.FormatInt(now%1000, 10), share,
		strings.Join(p.units, " "), strconv.Itoa(len(p.bands)))
	for _, b := range p.bands {
		a = append(a, b.name, strconv.Itoa(b.unit), b.kind, b.a, b.b)
	}
	return append(a, more...)
}

// stored returns p's bands as a stored limit's text (core.lua's KEYS[2]:
// "<mode> <k> <bands>", each band's unit by name), in mode "enforce".
func (p policy) stored() string {
	f := []string{"enforce", strconv.Itoa(len(p.bands))}
	for _, b := range p.bands {
		f = append(f, b.name, p.units[b.unit-1], b.kind, b.a, b.b)
	}
	return strings.Join(f, " ")
}

// ones returns one cost of 1 per unit of p, as a request's costs.
func (p policy) ones() []any {
	c := make([]any, len(p.units))
	for i := range c {
		c[i] = "1"
	}
	return c
}

// The shares of ARGV[3] (core.lua's header).
const whole = "1" // the whole limit

// group is the share of a caller on Redis whose fleet of n leaves the held
// ranks their own shares: "<n> <held>...".
func group(n int, held ...int) string {
	s := strconv.Itoa(n)
	for _, k := range held {
		s += " " + strconv.Itoa(k)
	}
	return s
}

// member is member k's own share of a fleet of n, pacing locally, also
// within a fleet of also (0: none): "m <n> <k> <also>".
func member(n, k, also int) string {
	return "m " + strconv.Itoa(n) + " " + strconv.Itoa(k) + " " + strconv.Itoa(also)
}

func ff(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
