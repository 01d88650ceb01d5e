package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/pacer-go/pacer/admin"
)

func (c *cli) history(ctx context.Context, args []string) error {
	fs := c.flagSet("history")
	asJSON := fs.Bool("json", false, "print a JSON array")
	pos, err := c.parse(fs, "history", args)
	if err != nil {
		return err
	}
	if err := positionals("history", pos, 0, "KEY"); err != nil {
		return err
	}
	key := pos[0]
	if err := c.connect(ctx); err != nil {
		return err
	}
	defer c.close()

	h, err := c.admin.History(ctx, key)
	if err != nil {
		return c.keyError("history", key, err)
	}
	if len(h) == 0 {
		// No history: tell an unknown key (a typo, the wrong -prefix)
		// from a known one nobody changed.
		if _, err := c.admin.Status(ctx, key); err != nil {
			return c.keyError("history", key, err)
		}
	}
	if *asJSON {
		if h == nil {
			h = []admin.Change{}
		}
		return writeJSON(c.stdout, h)
	}
	if len(h) == 0 {
		_, err := fmt.Fprintf(c.stdout, "%s: no change recorded\n", clean(key))
		return err
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "TIME\tWHO\tCHANGE\tREASON\n")
	for _, ch := range h {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", stamp(ch.At), tabless(ch.Who), tabless(changeText(ch)), tabless(ch.Reason))
	}
	return tw.Flush()
}

// changeText says what a change did: the stored limit before and after
// for set and unset, a tenant's stored weight for weight, the stored
// in-flight N for in-flight, the op alone for a pause or a resume.
func changeText(ch admin.Change) string {
	switch ch.Op {
	case "set", "unset":
		return fmt.Sprintf("%s: %s -> %s", ch.Op, orNone(ch.Before), orNone(ch.After))
	case "weight":
		return fmt.Sprintf("weight of tenant %q: %s -> %s", ch.Tenant, orNone(ch.Before), orNone(ch.After))
	case "in-flight":
		return fmt.Sprintf("in-flight N: %s -> %s", orNone(ch.Before), orNone(ch.After))
	}
	return ch.Op
}

// tabless is s cleaned for a tabwriter cell.
func tabless(s string) string {
	return strings.ReplaceAll(clean(s), `\t`, " ")
}
