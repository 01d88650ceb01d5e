package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/pacer-go/pacer/admin"
	"github.com/pacer-go/pacer/internal/names"
	"github.com/pacer-go/pacer/reserve"
)

// keyView is one key as status and watch show it: reserve's KeyStatus and
// what the command adds.
type keyView struct {
	admin.KeyStatus
	// Admissions is the slots granted per second between two samples:
	// reservations (a leased slot, used or not, and a reservation moved to
	// a fresh slot count too), not calls sent. nil when not known (not
	// sampled, or the key's state was created or expired between the
	// samples). Its JSON name stays admissions_per_s for scripts.
	Admissions *float64 `json:"admissions_per_s"`

	prev *admin.KeyStatus // the key's read before this one (watch, web), nil if none
}

func newKeyView(st admin.KeyStatus) keyView { return keyView{KeyStatus: st} }

// hasState says whether Redis held the key's state (its buckets) at the
// read.
func hasState(st admin.KeyStatus) bool { return st.HasState }

// admissions (slots granted per second) is the growth of Reservations
// from a to b, per second of
// Redis's clock; false when it cannot be told: the state was created or
// expired (and perhaps created again) in between.
func admissions(a, b admin.KeyStatus) (float64, bool) {
	dt := b.Now.Sub(a.Now).Seconds()
	switch {
	case hasState(a) != hasState(b), b.Reservations < a.Reservations, dt <= 0:
		return 0, false
	case !hasState(b):
		return 0, true
	}
	return float64(b.Reservations-a.Reservations) / dt, true
}

// isPattern says whether s is a glob rather than one key's name.
func isPattern(s string) bool { return s == "" || strings.ContainsAny(s, `*?[\`) }

// keys returns the keys pattern names: those matching a glob, or the one
// key a plain name gives.
func (c *cli) keys(ctx context.Context, pattern string) ([]string, error) {
	if !isPattern(pattern) {
		return []string{pattern}, nil
	}
	keys, err := c.admin.Keys(ctx, pattern)
	if err != nil {
		return nil, fmt.Errorf("listing keys %q: Redis at %s failed: %v", pattern, c.addr, err)
	}
	return keys, nil
}

// statuses reads each key. A key that a pattern listed but that is gone
// by now is left out; one named on its own is an error. Keys that fail
// are left out and their errors returned.
func (c *cli) statuses(ctx context.Context, op string, keys []string, exact bool) ([]admin.KeyStatus, []error) {
	var out []admin.KeyStatus
	var errs []error
	for _, k := range keys {
		st, err := c.admin.Status(ctx, k)
		switch {
		case errors.Is(err, admin.ErrUnknownKey) && !exact:
		case err != nil:
			errs = append(errs, c.keyError(op, k, err))
		default:
			out = append(out, st)
		}
		if ctx.Err() != nil {
			break
		}
	}
	return out, errs
}

type statusJSON struct {
	Now    time.Time      `json:"now"` // Redis's clock
	Prefix string         `json:"prefix"`
	Sample time.Duration  `json:"sample_ns"`
	Keys   []keyView      `json:"keys"`
	Fleet  []admin.Member `json:"fleet"`
}

func (c *cli) status(ctx context.Context, args []string) error {
	fs := c.flagSet("status")
	asJSON := fs.Bool("json", false, "print one JSON object")
	sample := fs.Duration("sample", time.Second, "how long apart the two reads that give the slots granted per second are (0: read once, no such figure)")
	pos, err := c.parse(fs, "status", args)
	if err != nil {
		return err
	}
	if err := positionals("status", pos, 1); err != nil {
		return err
	}
	if *sample < 0 {
		return usagef("status: -sample %v: want 0 or more", *sample)
	}
	pattern := ""
	if len(pos) == 1 {
		pattern = pos[0]
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	defer c.close()

	keys, err := c.keys(ctx, pattern)
	if err != nil {
		return err
	}
	exact := !isPattern(pattern)
	if len(keys) == 0 && !exact {
		return c.noMatch(ctx, fmt.Sprintf("status: no key matches %q under prefix %q", clean(cmp.Or(pattern, "*")), clean(c.prefix)))
	}
	first, errs := c.statuses(ctx, "status", keys, exact)
	if exact && len(errs) > 0 {
		if errors.Is(errs[0], admin.ErrUnknownKey) {
			return c.noMatch(ctx, errs[0].Error())
		}
		return errs[0]
	}
	views := make([]keyView, 0, len(first))
	if *sample > 0 && len(first) > 0 {
		select {
		case <-time.After(*sample):
		case <-ctx.Done():
			return ctx.Err()
		}
		names := make([]string, len(first))
		for i, st := range first {
			names[i] = st.Key
		}
		second, errs2 := c.statuses(ctx, "status", names, exact)
		errs = append(errs, errs2...)
		for _, st := range first {
			// A key gone by the second read (expired, nothing stored or
			// reported) is shown as first read, its slots granted n/a.
			v := newKeyView(st)
			if i := slices.IndexFunc(second, func(b admin.KeyStatus) bool { return b.Key == st.Key }); i >= 0 {
				v = newKeyView(second[i])
				if r, ok := admissions(st, second[i]); ok {
					v.Admissions = &r
				}
			}
			views = append(views, v)
		}
	} else {
		for _, st := range first {
			views = append(views, newKeyView(st))
		}
	}
	if exact && len(errs) > 0 {
		return errs[0]
	}
	fleet, err := c.admin.Fleet(ctx)
	if err != nil {
		return fmt.Errorf("status: reading the fleet: Redis at %s failed: %v", c.addr, err)
	}
	now, err := c.rdb.Time(ctx).Result()
	if err != nil {
		return fmt.Errorf("status: reading Redis's clock: Redis at %s failed: %v", c.addr, err)
	}
	if *asJSON {
		err = writeJSON(c.stdout, statusJSON{Now: now.UTC(), Prefix: c.prefix, Sample: *sample, Keys: views, Fleet: fleet})
	} else {
		err = c.printStatus(c.stdout, pattern, *sample, views, fleet, now)
	}
	if err != nil {
		return err
	}
	for _, e := range errs {
		fmt.Fprintf(c.stderr, "pacer: %s\n", oneLine(e.Error()))
	}
	if len(errs) > 0 {
		return fmt.Errorf("status: %d of %d keys could not be read", len(errs), len(keys))
	}
	return nil
}

func (c *cli) printStatus(w io.Writer, pattern string, sample time.Duration, views []keyView, fleet []admin.Member, now time.Time) error {
	var b strings.Builder
	if len(views) == 0 {
		p := pattern
		if p == "" {
			p = "*"
		}
		fmt.Fprintf(&b, "no key matches %q under prefix %q\n", clean(p), clean(c.prefix))
	}
	for _, v := range views {
		writeKey(&b, v, sample)
	}
	writeFleet(&b, fleet, now)
	_, err := io.WriteString(w, b.String())
	return err
}

// writeKey writes one key's block.
func writeKey(b *strings.Builder, v keyView, sample time.Duration) {
	line := func(label, format string, args ...any) {
		fmt.Fprintf(b, "  %-11s %s\n", label, fmt.Sprintf(format, args...))
	}
	fmt.Fprintf(b, "%s\n", clean(v.Key))
	switch v.Source {
	case "stored":
		if code := codeBands(v.KeyStatus); len(code) > 0 {
			line("limit", "%s (%s stored by an operator: see history; %s the code's, reported by a Limiter %s)",
				clean(v.Limit), clean(bandNames(v.Stored)), clean(strings.Join(code, ", ")), ago(v.Now, v.Reported))
		} else {
			line("limit", "%s (stored by an operator: see history)", clean(v.Limit))
		}
	case "code":
		line("limit", "%s (the code's, reported by a Limiter %s)", clean(v.Limit), ago(v.Now, v.Reported))
	default:
		line("limit", "unknown (none stored, and no live Limiter reports the one in its code)")
	}
	switch {
	case v.StoredLimit == "":
		line("stored", "none")
	case v.Shadow:
		line("stored", "%s (shadow mode: counted, not enforced)", clean(v.StoredLimit))
	default:
		line("stored", "%s (enforced)", clean(v.StoredLimit))
	}
	if !hasState(v.KeyStatus) {
		line("queue", "empty (no state: no reservation lately)")
	}
	for i, band := range v.Bands {
		label := ""
		if i == 0 {
			label = "queue"
		}
		line(label, "%s", bandText(band, unitOf(v.Policy, band.Name)))
	}
	if v.Paused > 0 {
		line("paused", "%v left (no slot before %s)", human(v.Paused), stamp(v.Now.Add(v.Paused)))
	} else {
		line("paused", "no")
	}
	line("binding", "%s", bindingText(v.KeyStatus))
	switch {
	case sample == 0:
		line("granted", "not sampled (-sample 0)")
	case v.Admissions == nil:
		line("granted", "n/a (the key's state was created or expired between the samples)")
	default:
		line("granted", "%s slots/s (reservations, not calls sent; sampled over %v)", num(*v.Admissions), sample)
	}
	if f := v.ShadowFigures; f != nil {
		line("shadow", "%d calls, %d would have waited: mean wait %v, max wait %v; its queue %v",
			f.Calls, f.Delayed, human(f.MeanWait), human(f.MaxWait), human(max(0, f.Queue)))
	}
	writeTenants(line, v.KeyStatus)
	writeSeats(line, v.Seats)
}

// bindingText says what makes a call of one unit wait now, and when it
// frees (admin.KeyStatus.Binding).
func bindingText(st admin.KeyStatus) string {
	switch st.Binding {
	case "":
		return "none (a call of one unit would not wait)"
	case reserve.PauseBinding:
		return fmt.Sprintf("%s (the key's pause): frees in %v", names.BandPause, human(st.Frees))
	}
	return fmt.Sprintf("band %s: frees in %v", clean(st.Binding), human(st.Frees))
}

// bindingShort is bindingText for watch's column.
func bindingShort(st admin.KeyStatus) string {
	switch st.Binding {
	case "":
		return "-"
	case reserve.PauseBinding:
		return fmt.Sprintf("%s %v", names.BandPause, human(st.Frees))
	}
	return fmt.Sprintf("%s %v", clean(st.Binding), human(st.Frees))
}

// writeTenants writes a key's fair tenants, the next to book first in each
// lane, with their queues and shares, and the stored weights; nothing for a
// key with neither.
func writeTenants(line func(label, format string, args ...any), st admin.KeyStatus) {
	label := "tenants"
	for _, ts := range st.Tenants {
		state := "not waiting"
		switch {
		case ts.Waiting:
			state = "waiting for its turn"
		case ts.Behind > 0:
			state = "booked ahead"
		}
		figures := ""
		if ts.Queued > 0 {
			figures += fmt.Sprintf(", %d queued (the oldest for %v)", ts.Queued, human(ts.Oldest))
		}
		if ts.Share > 0 {
			figures += fmt.Sprintf(", %.0f%% of the lane lately", 100*ts.Share)
		}
		weight := ""
		if w, ok := st.Weights[ts.Tenant]; ok {
			weight = fmt.Sprintf(", stored weight %g", w)
		}
		line(label, "%-6s %q %s%s, %v behind the lane's front%s", ts.Lane, clean(ts.Tenant), state, figures, human(ts.Behind), weight)
		label = ""
	}
	var stored []string
	for t := range st.Weights {
		stored = append(stored, t)
	}
	slices.Sort(stored)
	for _, t := range stored {
		if !slices.ContainsFunc(st.Tenants, func(ts admin.TenantStatus) bool { return ts.Tenant == t }) {
			line(label, "%q idle, stored weight %g", clean(t), st.Weights[t])
			label = ""
		}
	}
}

// codeBands are the names of the bands in force that the stored limit
// does not name: the code's, kept.
func codeBands(st admin.KeyStatus) []string {
	var out []string
	for _, b := range st.Policy {
		if !slices.ContainsFunc(st.Stored, func(s reserve.Band) bool { return s.Name == b.Name }) {
			out = append(out, b.Name)
		}
	}
	return out
}

// bandNames are pol's bands' names, joined.
func bandNames(pol reserve.Policy) string {
	names := make([]string, len(pol))
	for i, b := range pol {
		names[i] = b.Name
	}
	return strings.Join(names, ", ")
}

// unitOf is the unit band name charges in pol (its name if unknown).
func unitOf(pol reserve.Policy, name string) string {
	for _, b := range pol {
		if b.Name == name && b.Unit != "" {
			return b.Unit
		}
	}
	return name
}

// bandText is one band's queue.
func bandText(b admin.BandStatus, unit string) string {
	name := clean(b.Name)
	if !b.Bucket {
		if b.N != b.N { // NaN: the policy in force does not name the band
			return fmt.Sprintf("%s: %s %s used in the latest window (its quota unknown)", name, num(b.Used), clean(unit))
		}
		return fmt.Sprintf("%s: %s of %s %s used, the window ends in %v", name, num(b.Used), num(b.N), clean(unit), human(b.WindowEnd))
	}
	if b.LastSlot <= 0 {
		return fmt.Sprintf("%s: none queued (the last slot was %v ago)", name, human(-b.LastSlot))
	}
	queued := num(b.Queued)
	if b.Queued != b.Queued {
		queued = "(rate unknown)"
	}
	if b.Queued == 0 && b.Spare == b.Spare {
		// Another band (or the pause) set its slots: its own figure is
		// its headroom, not that band's queue.
		return fmt.Sprintf("%s: last slot in %v, none waits for this band (it holds %s %s when the key frees)", name, human(b.LastSlot), num(b.Spare), clean(unit))
	}
	return fmt.Sprintf("%s: last slot in %v, %s %s queued", name, human(b.LastSlot), queued, clean(unit))
}

// writeFleet writes the fleet's block.
func writeFleet(b *strings.Builder, fleet []admin.Member, now time.Time) {
	local := 0
	for _, m := range fleet {
		if m.Mode == names.ModeLocal {
			local++
		}
	}
	switch len(fleet) {
	case 0:
		fmt.Fprintf(b, "fleet: no Limiter heard from\n")
		return
	case 1:
		fmt.Fprintf(b, "fleet: 1 Limiter, %d on Redis, %d pacing locally\n", len(fleet)-local, local)
	default:
		fmt.Fprintf(b, "fleet: %d Limiters, %d on Redis, %d pacing locally\n", len(fleet), len(fleet)-local, local)
	}
	for _, m := range fleet {
		mode := clean(m.Mode)
		if m.Mode == names.ModeLocal {
			mode = "local (pacing locally: Redis unavailable to it)"
		}
		since := "unknown"
		if !m.Since.IsZero() {
			since = fmt.Sprintf("%s (%s)", stamp(m.Since), ago(now, m.Since))
		}
		fmt.Fprintf(b, "  %s  %s since %s, heard %s\n", clean(m.ID), mode, since, ago(now, m.Heard))
	}
}
