package lua_test

// ARGV of the scripts built on core.lua, for the tests that drive them on
// a client clock (share_test.go and the tests beside it): the common
// arguments (ARGV[1] the deadline, ARGV[2] the environment, ARGV[3] the
// policy; core.lua's header, docs/protocol.md's "Common arguments"), the
// shares of ARGV[2], and Reserve's requests as little-endian doubles.

import (
	"encoding/binary"
	"math"
	"strconv"
	"strings"
)

// A band is one of ARGV[3]'s text records: name, unit, kind, a, b.
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

// A policy is a caller's units and bands (ARGV[3]).
type policy struct {
	units []string
	bands []band
}

// permits is a Limit's policy: one bucket named permits.
func permits(rate, burst float64) policy {
	return policy{[]string{"permits"}, []band{bucket("permits", 1, rate, burst)}}
}

// arg returns p as ARGV[3]: "" for none (no band), a Limit (one bucket named permits charging the
// unit permits) as "L" and its rate and burst, two little-endian doubles,
// as Go's reserve sends it; any other policy as text, "<nunits> <units...>
// <k> <bands...>".
func (p policy) arg() string {
	if len(p.units) == 0 && len(p.bands) == 0 {
		return "" // no band: the state's records alone
	}
	if len(p.units) == 1 && p.units[0] == "permits" && len(p.bands) == 1 && p.bands[0].name == "permits" && p.bands[0].kind == "b" {
		rate, err1 := strconv.ParseFloat(p.bands[0].a, 64)
		burst, err2 := strconv.ParseFloat(p.bands[0].b, 64)
		if err1 == nil && err2 == nil {
			return limitArg(rate, burst)
		}
	}
	f := append([]string{strconv.Itoa(len(p.units))}, p.units...)
	f = append(f, strconv.Itoa(len(p.bands)))
	for _, b := range p.bands {
		f = append(f, b.name, strconv.Itoa(b.unit), b.kind, b.a, b.b)
	}
	return strings.Join(f, " ")
}

// limitArg is ARGV[3] of a Limit: "L" then its rate and burst, struct
// "<dd".
func limitArg(rate, burst float64) string { return "L" + doubles(rate, burst) }

// doubles returns the numbers as little-endian doubles (struct "<d" each):
// Reserve's requests, a Limit's rate and burst.
func doubles(v ...float64) string {
	b := make([]byte, 0, 8*len(v))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
	}
	return string(b)
}

// env returns ARGV[2] at the client clock now (Unix ns), with share (the
// format to write may lead it: "f2 1").
func env(now int64, share string) string {
	return "t" + strconv.FormatInt(now/1000, 10) + ":" + strconv.FormatInt(now%1000, 10) + " " + share
}

// args returns ARGV[1..opi-1] at the client clock now (Unix ns) with share
// (ARGV[2]'s last part), then more, the operation's own arguments.
func (p policy) args(now int64, share string, more ...any) []any {
	a := make([]any, 0, 3+len(more))
	a = append(a, "", env(now, share), p.arg())
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
func (p policy) ones() []float64 {
	c := make([]float64, len(p.units))
	for i := range c {
		c[i] = 1
	}
	return c
}

// onesText returns one cost of 1 per unit of p, as the text arguments
// the scripts other than Reserve take (Adjust's, Peek's).
func (p policy) onesText() []any {
	c := make([]any, len(p.units))
	for i := range c {
		c[i] = "1"
	}
	return c
}

// The shares of ARGV[2] (core.lua's header).
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
