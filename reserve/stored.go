package reserve

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// The text form of a policy (Policy.MarshalText) that the scripts read from
// a key's stored limit (core.lua, KEYS[2]) and that Limiters report for
// their keys (the fleet's policies hash): "<k>" then, for each of k bands,
// " <name> <unit> <kind> <a> <b>", kind "b" (a bucket: a = rate, b = burst)
// or "w" (a window: a = N, b = "<length µs>:<origin mod length, µs>") or
// "c" (a calendar window: a = N, b = "<period>:<zone>", "day:UTC").

// Validate reports whether p is usable, with an error matching
// ErrInvalidPolicy, or for a bucket band ErrInvalidRate, ErrInvalidBurst or
// ErrInvalidLimit, or for a window band ErrInvalidWindow.
func (p Policy) Validate() error {
	_, err := p.compile()
	return err
}

// MarshalText encodes p in the text form the scripts read and cmd/pacer
// stores ("1 permits permits b 10 5" is Limit{Rate: 10, Burst: 5}), so that a
// Policy can live in a JSON or YAML configuration. p must be valid
// (Validate), or empty: no policy is "". A window's Origin is kept modulo
// its Length, in whole µs.
func (p Policy) MarshalText() ([]byte, error) {
	if len(p) == 0 {
		return []byte{}, nil
	}
	s, err := p.compile()
	if err != nil {
		return nil, err
	}
	return []byte(s.storedText()), nil
}

// UnmarshalText decodes MarshalText's form into p, checked (an error
// matching ErrInvalidPolicy or the band's own); "" is no policy (nil). p is
// left as it was on an error.
func (p *Policy) UnmarshalText(text []byte) error {
	if len(text) == 0 {
		*p = nil
		return nil
	}
	pol, err := parseStoredText(string(text))
	if err != nil {
		return err
	}
	*p = pol
	return nil
}

// storedText returns s in the stored text form.
func (s *spec) storedText() string {
	if s.stored != "" {
		return s.stored
	}
	return s.storedForm()
}

// storedForm builds storedText's text.
func (s *spec) storedForm() string {
	var b strings.Builder
	b.WriteString(strconv.Itoa(len(s.bands)))
	for _, band := range s.bands {
		kind, a, x := band.record()
		fmt.Fprintf(&b, " %s %s %s %s %s", band.name, s.units[band.unit], kind, a, x)
	}
	return b.String()
}

// parseStoredText parses the stored text form back into a Policy, checked.
func parseStoredText(text string) (Policy, error) {
	f := strings.Fields(text)
	if len(f) < 1 {
		return nil, fmt.Errorf("%w: empty", ErrInvalidPolicy)
	}
	k, err := strconv.Atoi(f[0])
	if err != nil || k < 1 || len(f) != 1+5*k {
		return nil, fmt.Errorf("%w: %q: want k then k bands of 5 fields", ErrInvalidPolicy, text)
	}
	pol := make(Policy, 0, k)
	for i := range k {
		r := f[1+5*i : 6+5*i]
		band := Band{Name: r[0], Unit: r[1]}
		a, err := strconv.ParseFloat(r[3], 64)
		if err != nil {
			return nil, fmt.Errorf("%w: %q: band %s: %v", ErrInvalidPolicy, text, r[0], err)
		}
		switch r[2] {
		case "b":
			burst, err := strconv.ParseFloat(r[4], 64)
			if err != nil || burst != math.Trunc(burst) || burst > math.MaxInt32 {
				return nil, fmt.Errorf("%w: %q: band %s: burst %q", ErrInvalidPolicy, text, r[0], r[4])
			}
			band.Limit = Limit{Rate: a, Burst: int(burst)}
		case "w":
			l, o, ok := strings.Cut(r[4], ":")
			length, err1 := strconv.ParseInt(l, 10, 64)
			origin, err2 := strconv.ParseInt(o, 10, 64)
			if !ok || err1 != nil || err2 != nil {
				return nil, fmt.Errorf("%w: %q: band %s: window %q", ErrInvalidPolicy, text, r[0], r[4])
			}
			band.Window = Window{N: a, Length: time.Duration(length) * time.Microsecond}
			if origin != 0 {
				band.Window.Origin = time.UnixMicro(origin)
			}
		case "c":
			c, err := calendarFromSpec(r[4])
			if err != nil {
				return nil, fmt.Errorf("%w: %q: band %s: %w", ErrInvalidPolicy, text, r[0], err)
			}
			band.Window = Window{N: a, Calendar: c.period, Location: c.loc}
		default:
			return nil, fmt.Errorf("%w: %q: band %s: kind %q", ErrInvalidPolicy, text, r[0], r[2])
		}
		pol = append(pol, band)
	}
	if _, err := pol.compile(); err != nil {
		return nil, fmt.Errorf("%w: %q: %w", ErrInvalidPolicy, text, err)
	}
	return pol, nil
}

// String returns the policy for people: "permits: 50/s, burst 5",
// "requests: 500 per 1m0s; tokens: 30000/s, burst 30000 (tokens)".
func (p Policy) String() string {
	parts := make([]string, 0, len(p))
	for _, b := range p {
		var s string
		if b.InFlight != 0 {
			s = fmt.Sprintf("%s: %d in flight", b.Name, b.InFlight)
		} else if w := b.Window; w.Calendar != 0 {
			s = fmt.Sprintf("%s: %s/%s %s", b.Name, humanFloat(w.N), w.Calendar, zoneName(w.Location))
		} else if b.Window != (Window{}) {
			s = fmt.Sprintf("%s: %s per %v", b.Name, humanFloat(b.Window.N), b.Window.Length)
			if !b.Window.Origin.IsZero() && b.Window.Origin.UnixMicro()%b.Window.Length.Microseconds() != 0 {
				s += fmt.Sprintf(" from %s", b.Window.Origin.UTC().Format(time.RFC3339Nano))
			}
		} else {
			s = fmt.Sprintf("%s: %s/s, burst %d", b.Name, humanFloat(b.Limit.Rate), b.Limit.Burst)
		}
		if b.Unit != "" && b.Unit != b.Name {
			s += " (" + b.Unit + ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// humanFloat writes f in full below 10^15, with an exponent above.
func humanFloat(f float64) string {
	if math.Abs(f) < 1e15 {
		return formatFloat(f)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// zoneName is loc's name, "UTC" for nil.
func zoneName(loc *time.Location) string {
	if loc == nil {
		return "UTC"
	}
	return loc.String()
}
