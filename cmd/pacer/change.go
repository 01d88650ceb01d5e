package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/user"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/pacer-go/pacer/admin"
	"github.com/pacer-go/pacer/internal/layout"
	"github.com/pacer-go/pacer/reserve"
)

// changeFlags are the flags every change takes: why, and who.
type changeFlags struct {
	reason, who string
}

func (f *changeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.reason, "reason", "", "why (required): goes to the key's history")
	fs.StringVar(&f.who, "who", defaultWho(), "who makes the change, for the history")
}

// check refuses a change without a reason or a name.
func (f *changeFlags) check(cmd string) error {
	if strings.TrimSpace(f.reason) == "" {
		return usagef("%s: --reason is required: say why, for the key's history", cmd)
	}
	if strings.TrimSpace(f.who) == "" {
		return usagef("%s: --who is empty", cmd)
	}
	return nil
}

// defaultWho is $USER@hostname.
func defaultWho() string {
	name := os.Getenv("USER")
	if name == "" {
		if u, err := user.Current(); err == nil {
			name = u.Username
		}
	}
	host, _ := os.Hostname()
	return name + "@" + host
}

func (c *cli) unset(ctx context.Context, args []string) error {
	fs := c.flagSet("unset")
	var cf changeFlags
	cf.register(fs)
	inFlight := fs.Bool("in-flight", false, "remove the in-flight N stored for KEY (pacer set KEY --in-flight N) instead of its stored limit")
	pos, err := c.parse(fs, "unset", args)
	if err != nil {
		return err
	}
	if err := positionals("unset", pos, 0, "KEY"); err != nil {
		return err
	}
	if err := cf.check("unset"); err != nil {
		return err
	}
	key := pos[0]
	if err := c.connect(ctx); err != nil {
		return err
	}
	defer c.close()

	if *inFlight {
		ch, err := c.admin.UnsetInFlight(ctx, key, cf.who, cf.reason)
		if errors.Is(err, admin.ErrNotStored) {
			return fmt.Errorf("unset: key %q has no stored in-flight N under prefix %q: nothing changed", clean(key), clean(c.prefix))
		}
		if err != nil {
			return c.keyError("unset", key, err)
		}
		fmt.Fprintf(c.stdout, "%s: in-flight N removed by %s: %s -> none; the fleet goes back to the N in its code from its next call for seats\n",
			clean(key), clean(ch.Who), orNone(ch.Before))
		return nil
	}
	before := c.queue(ctx, key)
	ch, err := c.admin.UnsetLimit(ctx, key, cf.who, cf.reason)
	if errors.Is(err, admin.ErrNotStored) && !ch.At.IsZero() {
		return fmt.Errorf("unset: key %q has no stored limit under prefix %q, and Redis holds nothing of it (a mistyped key, or a Redis restarted empty): "+
			"the unset is recorded in its history, so that no Limiter puts back a stored limit Redis lost", clean(key), clean(c.prefix))
	}
	if errors.Is(err, admin.ErrNotStored) {
		return fmt.Errorf("unset: key %q has no stored limit under prefix %q: nothing changed", clean(key), clean(c.prefix))
	}
	if err != nil {
		return c.keyError("unset", key, err)
	}
	fmt.Fprintf(c.stdout, "%s: stored limit removed by %s: %s -> none; the fleet goes back to the limit in its code\n",
		clean(key), clean(ch.Who), orNone(ch.Before))
	if strings.HasSuffix(ch.Before, "(shadow)") {
		fmt.Fprintf(c.stdout, "%s: the limit removed was in shadow mode: what the fleet enforces did not change\n", clean(key))
	} else {
		fmt.Fprintf(c.stdout, "%s\n", c.limitApplies(ctx, key, before))
	}
	return nil
}

// queue is key's queue (admin.Client.Queue) as read now, nil if it cannot
// be told: read before a change, for what the change waits behind.
func (c *cli) queue(ctx context.Context, key string) *admin.Queue {
	q, err := c.admin.Queue(ctx, key)
	if err != nil {
		return nil
	}
	return &q
}

// at is a time the provider sees a change from: Redis's clock, to the ms.
func at(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// granted says what before (the queue read before a change) had granted
// under the previous limit: ": 45.0 permits already granted ..." or "".
func granted(before *admin.Queue, under string) string {
	if before == nil || before.Granted <= 0 {
		return ""
	}
	return fmt.Sprintf(": %s %s already granted %s", num(before.Granted), clean(before.Unit), under)
}

// limitApplies says when the provider sees a new limit of key (set, unset):
// the slots already granted keep their places, so it spaces the calls
// reserved after them, from the slot a call reserved now gets (read from
// Redis after the change); before is the queue read before it.
func (c *cli) limitApplies(ctx context.Context, key string, before *admin.Queue) string {
	q, err := c.admin.Queue(ctx, key)
	if err != nil {
		return fmt.Sprintf("%s: when the provider sees the new limit: unknown (%s)", clean(key), trimAdmin(err))
	}
	if q.Next <= 0 {
		return fmt.Sprintf("%s: the provider sees the new limit at once: no call was queued", clean(key))
	}
	pause := ""
	if q.Binding == reserve.PauseBinding {
		pause = "; the key's pause ends first"
	}
	return fmt.Sprintf("%s: the provider sees the new limit from %s (in %v%s)%s; the calls already granted keep their slots",
		clean(key), at(q.At()), human(q.Next), granted(before, "at the previous limit"), pause)
}

// maxPause is the longest pause (reserve's bound: 10 years).
const maxPause = 10 * 365 * 24 * time.Hour

// durationShape matches what time.ParseDuration reads, whatever its size:
// a duration of that shape it refuses is out of range.
var durationShape = regexp.MustCompile(`^[-+]?([0-9]*(\.[0-9]*)?(ns|us|µs|μs|ms|s|m|h))+$`)

func (c *cli) pause(ctx context.Context, args []string) error {
	fs := c.flagSet("pause")
	var cf changeFlags
	cf.register(fs)
	pos, err := c.parse(fs, "pause", args)
	if err != nil {
		return err
	}
	if err := positionals("pause", pos, 0, "KEY", "DURATION"); err != nil {
		return err
	}
	d, err := parsePause("pause", pos[1])
	if err != nil {
		return err
	}
	if err := cf.check("pause"); err != nil {
		return err
	}
	key := pos[0]
	if err := c.connect(ctx); err != nil {
		return err
	}
	defer c.close()

	msg, err := c.pauseKey(ctx, key, d, cf)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "%s\n", msg)
	return nil
}

// parsePause reads a pause's DURATION: positive, at most maxPause.
func parsePause(cmd, s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	switch {
	case err != nil && durationShape.MatchString(s), err == nil && d > maxPause:
		return 0, usagef("%s: DURATION %q: too long (at most %v, 10 years)", cmd, s, maxPause)
	case err != nil || d <= 0:
		return 0, usagef("%s: DURATION %q: want a positive duration such as 90s, 10m or 1h", cmd, s)
	}
	return d, nil
}

// pauseKey pauses key for d, recorded with cf's who and why: pause's
// change, which pacer web makes too. It returns what it did.
func (c *cli) pauseKey(ctx context.Context, key string, d time.Duration, cf changeFlags) (string, error) {
	// A pause belongs to the key, whatever its policy: only a key Redis
	// knows nothing of (a typo) is refused, by Pause itself, which makes
	// the pause and its history entry in one script call.
	before := c.queue(ctx, key)
	if err := c.admin.Pause(ctx, key, d, cf.who, cf.reason); err != nil {
		return "", c.keyError("pause", key, err)
	}
	msg := fmt.Sprintf("%s: paused by %s for %v, fleet-wide; \"pacer resume\" ends it sooner", clean(key), clean(cf.who), d)
	// The fleet's sleepers honour it at once; a call already sent is not
	// recalled; a slot granted inside it is taken again after it.
	msg += fmt.Sprintf("\n%s: the fleet's sleepers hold from now (they read the pause within about 250 ms; a call already sent is not recalled)", clean(key))
	if before != nil && before.Granted > 0 {
		msg += fmt.Sprintf("; a call granted before it whose slot falls inside it takes a slot after it (%s %s were queued)", num(before.Granted), clean(before.Unit))
	}
	if q, err := c.admin.Queue(ctx, key); err == nil {
		msg += fmt.Sprintf("; the provider sees calls again from %s (in %v)", at(q.At()), human(q.Next))
	}
	return msg, nil
}

func (c *cli) resume(ctx context.Context, args []string) error {
	fs := c.flagSet("resume")
	var cf changeFlags
	cf.register(fs)
	pos, err := c.parse(fs, "resume", args)
	if err != nil {
		return err
	}
	if err := positionals("resume", pos, 0, "KEY"); err != nil {
		return err
	}
	if err := cf.check("resume"); err != nil {
		return err
	}
	key := pos[0]
	if err := c.connect(ctx); err != nil {
		return err
	}
	defer c.close()

	msg, err := c.resumeKey(ctx, key, cf)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "%s\n", msg)
	return nil
}

// resumeKey ends key's pause, recorded with cf's who and why: resume's
// change, which pacer web makes too. It returns what it did.
func (c *cli) resumeKey(ctx context.Context, key string, cf changeFlags) (string, error) {
	// The time left, for the message; Resume itself refuses a key with no
	// pause in force (it may have ended since).
	st, err := c.admin.Status(ctx, key)
	if err != nil {
		return "", c.keyError("resume", key, err)
	}
	if st.Paused <= 0 {
		return "", wrapped{fmt.Sprintf("resume: key %q is not paused: nothing changed", clean(key)), admin.ErrNotPaused}
	}
	if err := c.admin.Resume(ctx, key, cf.who, cf.reason); errors.Is(err, admin.ErrNotPaused) {
		return "", wrapped{fmt.Sprintf("resume: key %q is not paused (its pause ended meanwhile): nothing changed", clean(key)), err}
	} else if err != nil {
		return "", c.keyError("resume", key, err)
	}
	msg := fmt.Sprintf("%s: resumed by %s (its pause had %v left); the calls waiting for it move up, and the fleet resumes at its rate now", clean(key), clean(cf.who), human(st.Paused))
	if q, err := c.admin.Queue(ctx, key); err == nil {
		if q.Next <= 0 {
			msg += fmt.Sprintf("\n%s: the provider sees calls again at once (the sleepers read the resume within about 250 ms)", clean(key))
		} else {
			msg += fmt.Sprintf("\n%s: the provider sees calls again at once: the calls granted during the pause move up (their sleepers read the resume within about 250 ms), behind any slot granted before it; a call reserved now goes at %s (in %v), behind them",
				clean(key), at(q.At()), human(q.Next))
		}
	}
	return msg, nil
}

func (c *cli) weight(ctx context.Context, args []string) error {
	fs := c.flagSet("weight")
	unset := fs.Bool("unset", false, "remove TENANT's stored weight: its requests are weighed by their code's Weight again")
	var cf changeFlags
	cf.register(fs)
	pos, err := c.parse(fs, "weight", args)
	if err != nil {
		return err
	}
	names := []string{"KEY", "TENANT", "WEIGHT"}
	if *unset {
		names = names[:2]
	}
	if err := positionals("weight", pos, 0, names...); err != nil {
		return err
	}
	var w float64
	if !*unset {
		w, err = strconv.ParseFloat(strings.TrimSpace(pos[2]), 64)
		if err != nil || !(w >= 1e-6 && w <= 1e6) {
			return usagef("weight: WEIGHT %q: want a number from 1e-6 to 1e6 (a tenant of weight 2 gets twice the share of one of weight 1)", pos[2])
		}
	}
	if len(pos[1]) > layout.MaxTenant {
		return usagef("weight: TENANT of %d bytes: at most %d", len(pos[1]), layout.MaxTenant)
	}
	if err := cf.check("weight"); err != nil {
		return err
	}
	key, tenant := pos[0], pos[1]
	if err := c.connect(ctx); err != nil {
		return err
	}
	defer c.close()

	if *unset {
		ch, err := c.admin.UnsetWeight(ctx, key, tenant, cf.who, cf.reason)
		if errors.Is(err, admin.ErrNotStored) {
			return fmt.Errorf("weight: tenant %q has no stored weight on key %q under prefix %q: nothing changed", clean(tenant), clean(key), clean(c.prefix))
		}
		if err != nil {
			return c.keyError("weight", key, err)
		}
		fmt.Fprintf(c.stdout, "%s: tenant %s's stored weight removed by %s: %s -> none; its requests are weighed by their code's Weight again\n",
			clean(key), clean(tenant), clean(ch.Who), ch.Before)
		return nil
	}
	_, err = c.admin.Status(ctx, key)
	unknown := errors.Is(err, admin.ErrUnknownKey)
	if err != nil && !unknown {
		return c.keyError("weight", key, err)
	}
	ch, err := c.admin.SetWeight(ctx, key, tenant, w, cf.who, cf.reason)
	if err != nil {
		return c.keyError("weight", key, err)
	}
	fmt.Fprintf(c.stdout, "%s: tenant %s's weight set by %s: %s -> %s, in every lane; every Limiter weighs its fair requests by it from their next call\n",
		clean(key), clean(tenant), clean(ch.Who), orNone(ch.Before), ch.After)
	if unknown {
		fmt.Fprintf(c.stderr, "pacer: note: no Limiter has used or reported key %q under prefix %q yet: check the name and -prefix\n", clean(key), clean(c.prefix))
	}
	return nil
}
