package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pacer-go/pacer/admin"
	"github.com/pacer-go/pacer/reserve"
)

// setFlags are set's flags but the change's own (--reason, --who).
type setFlags struct {
	band, rate, burst, n, window, origin, per, tz, unit, file string
	add, replace, shadow                                      bool
	inFlight                                                  string
}

func (f *setFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.band, "band", reserve.PermitsUnit, "the band to set, by name (a reserve.Limit's band is \"permits\")")
	fs.StringVar(&f.rate, "rate", "", "a bucket: units per second (> 0), with --burst")
	fs.StringVar(&f.burst, "burst", "", "a bucket: units at once (>= 1), with --rate")
	fs.StringVar(&f.n, "n", "", "a window: units per window (>= 1), with --window")
	fs.StringVar(&f.window, "window", "", "a window: its length (1m, 1h, 24h), with --n")
	fs.StringVar(&f.origin, "origin", "", "a window: a time a window starts at, RFC 3339 (default: the replaced band's; else windows start on whole UTC minutes, hours, days)")
	fs.StringVar(&f.per, "per", "", "a calendar window: day, week (ISO, from Monday) or month, from local midnight in --tz, with --n")
	fs.StringVar(&f.tz, "tz", "", "a calendar window: the time zone of its days, weeks or months, a tz database name such as America/Los_Angeles (default UTC), with --per")
	fs.StringVar(&f.unit, "unit", "", "with --add: the cost unit the new band charges (default: its name)")
	fs.BoolVar(&f.add, "add", false, "allow a band the key does not have (an unknown band is refused without it)")
	fs.StringVar(&f.file, "file", "", "set the bands of a policy file (- for stdin): one band a line, as status prints a limit")
	fs.BoolVar(&f.replace, "replace", false, "store only the bands given: the stored bands they do not name are removed")
	fs.BoolVar(&f.shadow, "shadow", false, "shadow mode: do not enforce the limit, count what it would do (see status)")
	fs.StringVar(&f.inFlight, "in-flight", "", "the N of KEY's in-flight band (at most N calls open at once, fleet-wide), 1 to 1000000, in place of the code's, alone (pacer unset KEY --in-flight removes it)")
}

// policy builds the bands to set from the flags given, checked.
func (f *setFlags) policy(given map[string]bool, stdin io.Reader) (reserve.Policy, error) {
	bucket := given["rate"] || given["burst"]
	window := given["n"] || given["window"] || given["origin"] || given["per"] || given["tz"]
	if given["file"] {
		for _, name := range []string{"band", "rate", "burst", "n", "window", "origin", "per", "tz", "unit"} {
			if given[name] {
				return nil, usagef("set: --file gives the bands: drop --%s", name)
			}
		}
		if f.file == "" {
			return nil, usagef("set: --file: empty path (- reads stdin)")
		}
		pol, err := readPolicyFile(f.file, stdin)
		if err != nil {
			return nil, usagef("set: --file %v", err)
		}
		return pol, nil
	}
	switch {
	case bucket && window:
		return nil, usagef("set: --rate and --burst make a bucket, --n and --window (or --per) a window: give one of the two")
	case !bucket && !window:
		return nil, usagef("set: give --rate and --burst (a bucket), --n and --window (a window), --n and --per (a calendar window), or --file")
	case given["unit"] && !f.add:
		return nil, usagef("set: --unit is the unit of a new band, with --add (a band the key has keeps its unit)")
	}
	units := cmp.Or(f.unit, f.band)
	band := reserve.Band{Name: f.band, Unit: f.unit}
	var err error
	if bucket {
		band.Limit, err = parseLimit("set", f.rate, f.burst, units, given)
	} else if given["per"] || given["tz"] {
		band.Window, err = parseCalendar("set", f.n, f.per, f.tz, units, given)
	} else {
		band.Window, err = parseWindow("set", f.n, f.window, f.origin, units, given)
	}
	if err != nil {
		return nil, err
	}
	pol := reserve.Policy{band}
	if err := pol.Validate(); err != nil {
		return nil, usagef("set: --band %q: %v", f.band, err)
	}
	return pol, nil
}

// parseLimit reads --rate and --burst, in units.
func parseLimit(cmd, rate, burst, units string, given map[string]bool) (reserve.Limit, error) {
	if !given["rate"] {
		return reserve.Limit{}, usagef("%s: --rate is required (%s per second)", cmd, clean(units))
	}
	if !given["burst"] {
		return reserve.Limit{}, usagef("%s: --burst is required (%s at once, at least 1)", cmd, clean(units))
	}
	r, err := strconv.ParseFloat(strings.TrimSpace(rate), 64)
	if err != nil || math.IsNaN(r) || math.IsInf(r, 0) || r <= 0 {
		return reserve.Limit{}, usagef("%s: --rate %q: want a positive, finite number of %s per second", cmd, rate, clean(units))
	}
	b, err := strconv.Atoi(strings.TrimSpace(burst))
	if err != nil || b < 1 {
		return reserve.Limit{}, usagef("%s: --burst %q: want a whole number of %s, at least 1", cmd, burst, clean(units))
	}
	lim := reserve.Limit{Rate: r, Burst: b}
	if err := lim.Validate(); err != nil {
		return reserve.Limit{}, usagef("%s: --rate %s --burst %d: %v", cmd, rate, b, err)
	}
	return lim, nil
}

// parseCalendar reads --n, --per and --tz, in units: a calendar window.
func parseCalendar(cmd, n, per, tz, units string, given map[string]bool) (reserve.Window, error) {
	if !given["per"] {
		return reserve.Window{}, usagef("%s: --tz %q is the zone of a calendar window: give --per day, week or month with it", cmd, tz)
	}
	if given["window"] || given["origin"] {
		return reserve.Window{}, usagef("%s: --per makes calendar windows (the zone's days, weeks or months): drop --window and --origin", cmd)
	}
	if !given["n"] {
		return reserve.Window{}, usagef("%s: --n is required with --per (%s per %s, at least 1)", cmd, clean(units), clean(per))
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(n), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 1 {
		return reserve.Window{}, usagef("%s: --n %q: want a finite number of %s per %s, at least 1", cmd, n, clean(units), clean(per))
	}
	period, err := reserve.ParsePeriod(strings.TrimSpace(per))
	if err != nil {
		return reserve.Window{}, usagef("%s: --per %q: want day, week or month", cmd, per)
	}
	zone := cmp.Or(strings.TrimSpace(tz), "UTC")
	loc, err := time.LoadLocation(zone)
	if err != nil || zone == "Local" {
		return reserve.Window{}, usagef("%s: --tz %q: unknown time zone (want a tz database name such as America/Los_Angeles, Europe/Paris or UTC)", cmd, tz)
	}
	w := reserve.Window{N: v, Calendar: period, Location: loc}
	if err := (reserve.Policy{{Name: "w", Window: w}}).Validate(); err != nil {
		return reserve.Window{}, usagef("%s: --n %s --per %s --tz %s: %v", cmd, n, per, zone, err)
	}
	return w, nil
}

// parseWindow reads --n, --window and --origin, in units.
func parseWindow(cmd, n, length, origin, units string, given map[string]bool) (reserve.Window, error) {
	if !given["n"] {
		return reserve.Window{}, usagef("%s: --n is required with --window (%s per window, at least 1)", cmd, clean(units))
	}
	if !given["window"] {
		return reserve.Window{}, usagef("%s: --window is required with --n (the window's length, such as 1m, 1h or 24h)", cmd)
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(n), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 1 {
		return reserve.Window{}, usagef("%s: --n %q: want a finite number of %s per window, at least 1", cmd, n, clean(units))
	}
	d, err := time.ParseDuration(strings.TrimSpace(length))
	if err != nil || d <= 0 {
		return reserve.Window{}, usagef("%s: --window %q: want a positive duration such as 1m, 1h or 24h", cmd, length)
	}
	w := reserve.Window{N: v, Length: d}
	if given["origin"] {
		if w.Origin, err = time.Parse(time.RFC3339Nano, strings.TrimSpace(origin)); err != nil {
			return reserve.Window{}, usagef("%s: --origin %q: want a time a window starts at, such as 2026-01-01T08:00:00Z (RFC 3339)", cmd, origin)
		}
	}
	if err := (reserve.Policy{{Name: "w", Window: w}}).Validate(); err != nil {
		return reserve.Window{}, usagef("%s: --n %s --window %s: %v", cmd, n, length, err)
	}
	return w, nil
}

func (c *cli) set(ctx context.Context, args []string) error {
	fs := c.flagSet("set")
	var f setFlags
	f.register(fs)
	var cf changeFlags
	cf.register(fs)
	pos, err := c.parse(fs, "set", args)
	if err != nil {
		return err
	}
	if err := positionals("set", pos, 0, "KEY"); err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	if given["in-flight"] {
		return c.setInFlight(ctx, pos[0], f, given, cf)
	}
	pol, err := f.policy(given, c.stdin)
	if err != nil {
		return err
	}
	if err := cf.check("set"); err != nil {
		return err
	}
	key := pos[0]
	if err := c.connect(ctx); err != nil {
		return err
	}
	defer c.close()

	lines, note, err := c.setBands(ctx, key, pol, f, cf)
	if err != nil {
		return err
	}
	for _, l := range lines {
		fmt.Fprintf(c.stdout, "%s\n", l)
	}
	if note != "" {
		fmt.Fprintf(c.stderr, "pacer: note: %s\n", note)
	}
	return nil
}

// setInFlight is set --in-flight: it stores key's in-flight N.
func (c *cli) setInFlight(ctx context.Context, key string, f setFlags, given map[string]bool, cf changeFlags) error {
	for _, name := range []string{"band", "rate", "burst", "n", "window", "origin", "per", "tz", "unit", "add", "file", "replace", "shadow"} {
		if given[name] {
			return usagef("set: --in-flight sets the N of the key's in-flight band, alone: drop --%s (set the other bands in another pacer set)", name)
		}
	}
	n, err := parseInFlight("set", f.inFlight)
	if err != nil {
		return err
	}
	if err := cf.check("set"); err != nil {
		return err
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	defer c.close()

	st, err := c.admin.Status(ctx, key)
	unknown := errors.Is(err, admin.ErrUnknownKey)
	if err != nil && !unknown {
		return c.keyError("set", key, err)
	}
	ch, err := c.admin.SetInFlight(ctx, key, n, cf.who, cf.reason)
	if err != nil {
		return c.keyError("set", key, err)
	}
	fmt.Fprintf(c.stdout, "%s: in-flight N set by %s: %s -> %s; every Limiter lets at most %d in flight on the key's in-flight band from its next call for seats (the calls in flight keep theirs)\n",
		clean(key), clean(ch.Who), orNone(ch.Before), ch.After, n)
	if unknown || st.Seats == nil || (st.Seats.Used == 0 && st.Seats.Waiting == 0 && len(st.Seats.Holders) == 0 && ch.Before == "") {
		fmt.Fprintf(c.stderr, "pacer: note: no call holds or waits for seats on key %q under prefix %q now: check the name and -prefix (an N set on a key without an in-flight band limits nothing)\n",
			clean(key), clean(c.prefix))
	}
	return nil
}

// setBands stores pol's bands on key, as f says (shadow, add, replace),
// recorded with cf's who and why: set's change, after set's checks, which
// pacer web makes too. It returns what it did, a line or two, and a note
// when no Limiter has used or reported key yet ("" otherwise); errors say
// that nothing changed, in words an operator can act on.
func (c *cli) setBands(ctx context.Context, key string, pol reserve.Policy, f setFlags, cf changeFlags) (lines []string, note string, err error) {
	_, err = c.admin.Status(ctx, key)
	unknown := errors.Is(err, admin.ErrUnknownKey)
	if err != nil && !unknown {
		return nil, "", c.keyError("set", key, err)
	}
	opts := admin.SetOptions{Shadow: f.shadow, Add: f.add, Replace: f.replace}
	before := c.queue(ctx, key)
	ch, err := c.admin.SetBands(ctx, key, pol, opts, cf.who, cf.reason)
	switch {
	case errors.Is(err, admin.ErrUnknownBand):
		return nil, "", wrapped{fmt.Sprintf("set: %s: check the name, or add the band with --add; nothing changed", trimAdmin(err)), err}
	case errors.Is(err, admin.ErrOtherMode):
		return nil, "", wrapped{fmt.Sprintf("set: %s: set them all (--file), or store only the bands given (--replace); nothing changed", trimAdmin(err)), err}
	case errors.Is(err, reserve.ErrInvalidPolicy):
		return nil, "", wrapped{fmt.Sprintf("set: %s; nothing changed", trimAdmin(err)), err}
	case err != nil:
		return nil, "", c.keyError("set", key, err)
	}
	effect := "every Limiter enforces it from its next reservation"
	if f.shadow {
		effect = "shadow mode: the Limiters keep their code's limit and count what this one would do (see status)"
	}
	lines = append(lines, fmt.Sprintf("%s: stored limit set by %s: %s -> %s; %s",
		clean(key), clean(ch.Who), orNone(ch.Before), orNone(ch.After), effect))
	if !f.shadow {
		lines = append(lines, c.limitApplies(ctx, key, before))
	}
	if unknown {
		return lines, fmt.Sprintf("no Limiter has used or reported key %q under prefix %q yet: check the name and -prefix", clean(key), clean(c.prefix)), nil
	}
	if !f.shadow {
		// The code's bands the stored limit does not name stay in force.
		if st, err := c.admin.Status(ctx, key); err == nil {
			var kept reserve.Policy
			for _, name := range codeBands(st) {
				i := slices.IndexFunc(st.Policy, func(b reserve.Band) bool { return b.Name == name })
				kept = append(kept, st.Policy[i])
			}
			if len(kept) > 0 {
				lines = append(lines, fmt.Sprintf("%s: the code's other bands stay in force: %s", clean(key), clean(kept.String())))
			}
		}
	}
	return lines, "", nil
}

// trimAdmin is err's message without package admin's prefix.
func trimAdmin(err error) string {
	return strings.TrimPrefix(err.Error(), "admin: ")
}
