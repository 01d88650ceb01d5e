package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/pacer-go/pacer/admin"
	"github.com/pacer-go/pacer/internal/names"
	"github.com/pacer-go/pacer/reserve"
	"golang.org/x/term"
)

// ANSI escapes watch uses on a terminal: no curses.
const (
	escHome      = "\x1b[H"
	escClear     = "\x1b[2J"
	escHide      = "\x1b[?25l"
	escShow      = "\x1b[?25h"
	escAltScreen = "\x1b[?1049h"
	escMainScree = "\x1b[?1049l"
)

// watchKey is what watch remembers of a key between frames.
type watchKey struct {
	last  admin.KeyStatus
	trail trail
	seen  time.Time // the last frame that listed it
}

// A frame is one refresh of watch.
type frame struct {
	Now    time.Time      `json:"now"` // Redis's clock
	Prefix string         `json:"prefix"`
	Keys   []keyView      `json:"keys"`
	Fleet  []admin.Member `json:"fleet"`
	Errors []string       `json:"errors,omitempty"`

	trails map[string]trail
}

func (c *cli) watch(ctx context.Context, args []string) error {
	fs := c.flagSet("watch")
	asJSON := fs.Bool("json", false, "print each frame as one JSON object on a line of its own")
	interval := fs.Duration("interval", time.Second, "time between frames")
	count := fs.Int("count", 0, "stop after this many frames (0: until Ctrl-C or SIGTERM)")
	pos, err := c.parse(fs, "watch", args)
	if err != nil {
		return err
	}
	if err := positionals("watch", pos, 1); err != nil {
		return err
	}
	if *interval < 10*time.Millisecond {
		return usagef("watch: -interval %v: want at least 10ms", *interval)
	}
	if *count < 0 {
		return usagef("watch: -count %d: want 0 or more", *count)
	}
	pattern := ""
	if len(pos) == 1 {
		pattern = pos[0]
	}

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := c.connect(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // interrupted while connecting
		}
		return err
	}
	defer c.close()

	screen, width, height := c.terminal()
	if *asJSON {
		screen = false
	}
	if screen {
		_, _ = io.WriteString(c.stdout, escAltScreen+escHide)
		defer func() { _, _ = io.WriteString(c.stdout, escShow+escMainScree) }()
	}
	keys := map[string]*watchKey{}
	tick := time.NewTicker(*interval)
	defer tick.Stop()
	for n := 1; ; n++ {
		f := c.readFrame(ctx, "watch", pattern, keys)
		if ctx.Err() != nil {
			return nil // interrupted: the frame may be half read
		}
		var err error
		switch {
		case *asJSON:
			err = writeLine(c.stdout, f)
		case screen:
			if w, h, ok := c.size(); ok {
				width, height = w, h
			}
			text := c.renderFrame(f, pattern, *interval, true)
			_, err = io.WriteString(c.stdout, escHome+escClear+fit(text, width, height))
		default:
			_, err = io.WriteString(c.stdout, c.renderFrame(f, pattern, *interval, false)+"\n")
		}
		if err != nil {
			return fmt.Errorf("watch: writing: %w", err)
		}
		if *count > 0 && n >= *count {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// terminal says whether stdout is a terminal, and its size.
func (c *cli) terminal() (bool, int, int) {
	f, ok := c.stdout.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return false, 0, 0
	}
	w, h, _ := c.size()
	return true, w, h
}

func (c *cli) size() (int, int, bool) {
	f, ok := c.stdout.(*os.File)
	if !ok {
		return 0, 0, false
	}
	w, h, err := term.GetSize(int(f.Fd()))
	return w, h, err == nil && w > 0 && h > 0
}

// readFrame reads the keys pattern names and the fleet, and notes each
// key's slots granted per second and queue in keys; op (watch, web) names
// the command in its errors.
func (c *cli) readFrame(ctx context.Context, op, pattern string, keys map[string]*watchKey) frame {
	f := frame{Prefix: c.prefix, Keys: []keyView{}, Fleet: []admin.Member{}, trails: map[string]trail{}}
	if now, err := c.rdb.Time(ctx).Result(); err == nil {
		f.Now = now.UTC()
	} else {
		f.Now = time.Now().UTC()
		f.Errors = append(f.Errors, fmt.Sprintf("Redis at %s: %v", c.addr, err))
		return f
	}
	names, err := c.keys(ctx, pattern)
	if err != nil {
		f.Errors = append(f.Errors, err.Error())
	}
	for _, name := range names {
		st, err := c.admin.Status(ctx, name)
		if errors.Is(err, admin.ErrUnknownKey) && isPattern(pattern) {
			continue // gone since it was listed
		}
		if err != nil {
			f.Errors = append(f.Errors, oneLine(c.keyError(op, name, err).Error()))
			continue
		}
		k := keys[name]
		if k == nil {
			k = &watchKey{}
			keys[name] = k
		}
		v := newKeyView(st)
		p := point{at: st.Now, rate: math.NaN(), queue: queueOf(st)}
		if !k.last.Now.IsZero() {
			if r, ok := admissions(k.last, st); ok {
				v.Admissions, p.rate = &r, r
			}
			prev := k.last
			v.prev = &prev
		}
		if st.Now.After(f.Now) {
			f.Now = st.Now // the sparklines end at the latest reading
		}
		k.last, k.seen = st, f.Now
		k.trail = k.trail.add(p)
		f.Keys = append(f.Keys, v)
		f.trails[name] = k.trail
	}
	for name, k := range keys {
		if f.Now.Sub(k.seen) > window {
			delete(keys, name)
		}
	}
	if fleet, err := c.admin.Fleet(ctx); err == nil {
		f.Fleet = fleet
	} else {
		f.Errors = append(f.Errors, fmt.Sprintf("the fleet: Redis at %s: %v", c.addr, err))
	}
	return f
}

// queueOf is the time to a key's last slot granted, over its buckets.
func queueOf(st admin.KeyStatus) time.Duration {
	var q time.Duration
	for _, b := range st.Bands {
		if b.Bucket {
			q = max(q, b.LastSlot)
		}
	}
	return q
}

// rateOf is the rate of the first bucket of the policy in force, the top
// of the sparkline of slots granted per second (0 if none).
func rateOf(pol reserve.Policy) float64 {
	_, r := firstBucket(pol)
	return r
}

// legend says what the columns count.
const legend = "GRANTED/s: slots granted per second (reservations), not calls sent; QUEUE: the time to the last slot granted; " +
	"BINDING: what a call of one unit waits for now (a band, or " + names.BandPause + " for the key's pause), and when it frees; " +
	"IN FLIGHT: an in-flight band's seats in use (/N when an operator stored one), the calls waiting, and the holders as rank:seats\n"

// renderFrame draws f: a header, one line per key, the legend, the
// fleet's line.
func (c *cli) renderFrame(f frame, pattern string, interval time.Duration, screen bool) string {
	var b strings.Builder
	p := pattern
	if p == "" {
		p = "*"
	}
	fmt.Fprintf(&b, "pacer watch  prefix %q  keys %q  every %v  %s", clean(c.prefix), clean(p), interval, stamp(f.Now))
	if screen {
		b.WriteString("  (Ctrl-C quits)")
	}
	b.WriteString("\n\n")
	width := sparkWidth(interval)
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "KEY\tGRANTED/s\tLAST MINUTE\tQUEUE\tLAST MINUTE\tBINDING\tIN FLIGHT\tLIMIT\n")
	for _, v := range f.Keys {
		t := f.trails[v.Key]
		rates := t.buckets(f.Now, width, func(p point) float64 { return p.rate }, true)
		queues := t.buckets(f.Now, width, func(p point) float64 { return p.queue.Seconds() }, false)
		rate := "n/a"
		if v.Admissions != nil {
			rate = num(*v.Admissions)
		}
		limit := "unknown"
		if v.Limit != "" {
			limit = clean(v.Limit) + " (" + v.Source + ")"
		}
		if v.Shadow {
			limit += ", shadow: " + clean(v.StoredLimit)
		}
		if v.Paused > 0 {
			limit = fmt.Sprintf("PAUSED %v; %s", human(v.Paused), limit)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%s\t%s\t%s\t%s\n", tabless(v.Key), rate, sparkline(rates, rateOf(v.Policy)),
			human(queueOf(v.KeyStatus)), sparkline(queues, 0), tabless(bindingShort(v.KeyStatus)), tabless(seatsShort(v.Seats)), limit)
	}
	_ = tw.Flush()
	if len(f.Keys) == 0 {
		fmt.Fprintf(&b, "(no key matches)\n")
	}
	b.WriteString("\n" + legend)
	b.WriteString(fleetLine(f.Fleet, f.Now))
	for _, e := range f.Errors {
		fmt.Fprintf(&b, "error: %s\n", oneLine(e))
	}
	return b.String()
}

// fleetLine sums the fleet up on one line.
func fleetLine(fleet []admin.Member, now time.Time) string {
	if len(fleet) == 0 {
		return "fleet: no Limiter heard from\n"
	}
	var local []string
	heard := fleet[0].Heard // Fleet lists the most recently heard first
	for _, m := range fleet {
		if m.Mode == names.ModeLocal {
			local = append(local, fmt.Sprintf("%s since %s", clean(m.ID), ago(now, m.Since)))
		}
	}
	s := fmt.Sprintf("fleet: %d Limiter%s, %d on Redis, %d pacing locally; last heard %s",
		len(fleet), plural(len(fleet)), len(fleet)-len(local), len(local), ago(now, heard))
	if len(local) > 0 {
		s += " (" + strings.Join(local, ", ") + ")"
	}
	return s + "\n"
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// fit cuts text to a width x height terminal: long lines are cut, lines
// past the bottom dropped (the last line says how many), and each line
// ends with CR LF, so the screen stays as drawn whatever the terminal's
// output modes.
func fit(text string, width, height int) string {
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if height > 1 && len(lines) > height-1 {
		more := len(lines) - (height - 2)
		lines = append(lines[:height-2], fmt.Sprintf("... %d more lines (a taller terminal, or a pattern, shows them)", more))
	}
	for i, l := range lines {
		if width > 0 && utf8.RuneCountInString(l) > width {
			r := []rune(l)
			lines[i] = string(r[:width])
		}
	}
	return strings.Join(lines, "\r\n") + "\r\n"
}

// writeLine writes v as one line of JSON.
func writeLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
