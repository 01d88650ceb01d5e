package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/pacer-go/pacer/admin"
)

// stateFormat shows the fleet's state format, or switches it (admin's
// SetFormat: docs/protocol.md and README's "Upgrading").
func (c *cli) stateFormat(ctx context.Context, args []string) error {
	fs := c.flagSet("format")
	asJSON := fs.Bool("json", false, "print the status as JSON")
	force := fs.Bool("force", false, "forward (to 2 or 3): switch even with members of an earlier release in the fleet; back: do not wait for every member")
	wait := fs.Duration("wait", 2*time.Minute, "back (to 1, or from 3 to 2): how long to wait for every member to write the format before rewriting the keys")
	var cf changeFlags
	cf.register(fs)
	pos, err := c.parse(fs, "format", args)
	if err != nil {
		return err
	}
	if err := positionals("format", pos, 1); err != nil {
		return err
	}
	to := 0
	if len(pos) == 1 {
		switch pos[0] {
		case "1":
			to = 1
		case "2":
			to = 2
		case "3":
			to = 3
		default:
			return usagef("format: %q: want 1, 2 or 3 (the state format the fleet writes)", pos[0])
		}
		if *asJSON {
			return usagef("format: --json shows the status: give no format with it")
		}
		if *wait <= 0 {
			return usagef("format: --wait %v: want a positive duration", *wait)
		}
		if err := cf.check("format"); err != nil {
			return err
		}
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	defer c.close()
	if to == 0 {
		st, err := c.admin.Format(ctx)
		if err != nil {
			return fmt.Errorf("format: Redis at %s: %w", c.addr, err)
		}
		if *asJSON {
			e := json.NewEncoder(c.stdout)
			e.SetIndent("", "  ")
			return e.Encode(st)
		}
		fmt.Fprintf(c.stdout, "The fleet writes state format %d (prefix %q).\n", st.Setting, c.prefix)
		fmt.Fprintf(c.stdout, "Keys: %d in format 1, %d in format 2, %d in format 3.\n", st.Format1, st.Format2, st.Format3)
		counts := map[string]int{}
		older := 0 // members that write a format but do not read format 3
		for _, m := range st.Members {
			counts[m.Writes]++
			if m.Writes != "" && m.Reads != "3" {
				older++
			}
		}
		fmt.Fprintf(c.stdout, "Members: %d write format 1, %d write format 2, %d write format 3; %d of v0.1.0 (they read formats 1 and 2), %d of a release before it (format 1 only).\n",
			counts["1"], counts["2"], counts["3"], older, counts[""])
		if w := counts["3"]; w > 0 {
			// Told format 3, a member keeps the heartbeat's indexes
			// (docs/protocol.md, Heartbeat): heartbeats cost what
			// changed, not the fleet's size, once every member does.
			fmt.Fprintf(c.stdout, "Heartbeats: %d of %d members keep the fleet's indexes (told format 3); until all do, each heartbeat reads every member.\n",
				w, len(st.Members))
		}
		for _, h := range st.History {
			fmt.Fprintf(c.stdout, "  %s  %d -> %d  by %s: %s", h.At.Format(time.RFC3339), h.From, h.To, clean(h.Who), clean(h.Reason))
			if h.To < h.From {
				fmt.Fprintf(c.stdout, " (%d keys rewritten)", h.Rewritten)
			}
			fmt.Fprintln(c.stdout)
		}
		return nil
	}
	ch, err := c.admin.SetFormat(ctx, to, adminFormatOptions(cf, *force, *wait, func(s string) { fmt.Fprintln(c.stderr, "format: "+s) }))
	if err != nil {
		return fmt.Errorf("format %d: %w", to, err)
	}
	fmt.Fprintf(c.stdout, "The fleet writes state format %d from each member's next heartbeat (was %d)", ch.To, ch.From)
	if to < 3 {
		fmt.Fprintf(c.stdout, "; %d keys rewritten in format %d: a release that reads it reads every key", ch.Rewritten, to)
	}
	fmt.Fprintln(c.stdout, ".")
	return nil
}

func adminFormatOptions(cf changeFlags, force bool, wait time.Duration, progress func(string)) admin.FormatOptions {
	return admin.FormatOptions{Who: cf.who, Reason: cf.reason, Force: force, Wait: wait, Progress: progress}
}
