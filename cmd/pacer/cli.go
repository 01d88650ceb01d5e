package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/pacer-go/pacer/admin"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

// cli is one run of the command: its output, and the global flags.
type cli struct {
	stdin          io.Reader // set --file -
	stdout, stderr io.Writer
	redisURL       string
	prefix         string
	heartbeat      time.Duration // the fleet's HeartbeatInterval (admin.Options)
	flagsInit      bool

	rdb   *redis.Client
	admin *admin.Client
	addr  string // the Redis address, for messages (never the password)
}

// A command is one subcommand.
type command struct {
	name    string
	args    string // the positional arguments, for the usage line
	summary string
	run     func(c *cli, ctx context.Context, args []string) error
}

// commands in the order "pacer help" lists them.
var commands []command

func init() {
	commands = []command{
		{"status", "[pattern] [--json] [--sample 1s]",
			"each key's limit, queue, pause and slots granted per second (reservations, not calls sent), then the fleet", (*cli).status},
		{"watch", "[pattern] [--json] [--interval 1s] [--count N]",
			"a screen refreshed in place: each key's slots granted per second and queue over the last minute", (*cli).watch},
		{"web", "[pattern] [--addr 127.0.0.1:8080] [--expose] [--write [--token T]] [--interval 1s]",
			"a live view of the keys and the fleet in a browser, on 127.0.0.1; with --write and a token, set, pause and resume from it", (*cli).web},
		{"history", "KEY [--json]", "the changes made to KEY, newest first", (*cli).history},
		{"set", "KEY [--band NAME] (--rate R --burst B | --n N --window D [--origin T] | --n N --per day|week|month [--tz ZONE] | --file F) [--add [--unit U]] [--replace] [--shadow] --reason TEXT [--who NAME] | KEY --in-flight N --reason TEXT",
			"store bands of KEY's limit by name, the others kept, enforced by every Limiter from its next reservation (or only counted, with --shadow); or the N of its in-flight band", (*cli).set},
		{"unset", "KEY [--in-flight] --reason TEXT [--who NAME]",
			"remove KEY's stored limit (or its stored in-flight N): the fleet goes back to the one in its code", (*cli).unset},
		{"pause", "KEY DURATION --reason TEXT [--who NAME]",
			"grant no slot on KEY for DURATION, fleet-wide (as a 429 with Retry-After would)", (*cli).pause},
		{"resume", "KEY --reason TEXT [--who NAME]", "end KEY's pause now", (*cli).resume},
		{"weight", "KEY TENANT WEIGHT --reason TEXT [--who NAME] | KEY TENANT --unset --reason TEXT",
			"store TENANT's weight on KEY for fair requests, in every lane (or remove it, with --unset)", (*cli).weight},
		{"format", "[1|2|3 --reason TEXT [--who NAME] [--force] [--wait 2m]] [--json]",
			"the state format the fleet writes; 3 once no process of an earlier release is left, 2 or 1 before a rollback (rewrites the keys)", (*cli).stateFormat},
		{"version", "", "this command's release, and the library's", (*cli).version},
		{"help", "[COMMAND]", "this help, or a command's", (*cli).help},
	}
}

const globalUsage = `Global flags (before or after the command):
  -redis URL     the fleet's Redis: redis://[user:password@]host:port/db,
                 rediss://... for TLS, or host:port (default $REDIS_URL)
  -prefix TEXT   the fleet's reserve.Options.KeyPrefix (default "pacer:")
  -heartbeat D   the fleet's reserve.Options.HeartbeatInterval (default 1s),
                 for the holders of in-flight seats status shows

Patterns are Redis globs on key names (* ? [abc]); a name without any of
* ? [ \ is one key, and an unknown one is an error. Times are Redis's clock.
Exit status: 0 done, 1 a runtime error (Redis, an unknown key, a refused
change), 2 a bad command line (nothing was sent to Redis).
`

func (c *cli) usage(w io.Writer) {
	fmt.Fprintf(w, "pacer: operate a fleet paced by github.com/pacer-go/pacer\n\nUsage: pacer [global flags] COMMAND [arguments and flags]\n\nCommands:\n")
	for _, cmd := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", cmd.name, cmd.summary)
	}
	fmt.Fprintf(w, "\n")
	for _, cmd := range commands {
		fmt.Fprintf(w, "  pacer %s %s\n", cmd.name, cmd.args)
	}
	fmt.Fprintf(w, "\n%s\nRun \"pacer help COMMAND\" for a command's flags.\n", globalUsage)
}

// main parses the global flags and runs the command.
func (c *cli) main(args []string) error {
	fs := c.flagSet("")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			c.usage(c.stdout)
			return errHelp
		}
		return usagef("%v (run \"pacer help\")", err)
	}
	if fs.NArg() == 0 {
		return usagef("no command given (run \"pacer help\" for the list)")
	}
	name, rest := fs.Arg(0), fs.Args()[1:]
	for _, cmd := range commands {
		if cmd.name == name {
			return cmd.run(c, context.Background(), rest)
		}
	}
	return usagef("unknown command %q (run \"pacer help\" for the list)", name)
}

func (c *cli) help(_ context.Context, args []string) error {
	if len(args) == 0 || args[0] == "help" {
		c.usage(c.stdout)
		return nil
	}
	for _, cmd := range commands {
		if cmd.name == args[0] {
			// Each command prints its flags on -h.
			return cmd.run(c, context.Background(), []string{"-h"})
		}
	}
	return usagef("help: unknown command %q", args[0])
}

// flagSet returns a FlagSet for the command name ("" for the global flags
// alone) that also takes the global flags, so they may come anywhere.
func (c *cli) flagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("pacer "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported on one line by run
	if !c.flagsInit {
		// -redis defaults to $REDIS_URL in connect, not here: a default is
		// printed by -h, and the URL may hold a password.
		c.prefix, c.heartbeat, c.flagsInit = reserve.DefaultKeyPrefix, time.Second, true
	}
	fs.StringVar(&c.redisURL, "redis", c.redisURL, "the fleet's Redis: redis://..., rediss://... or host:port (default $REDIS_URL)")
	fs.StringVar(&c.prefix, "prefix", c.prefix, "the fleet's key prefix (reserve.Options.KeyPrefix)")
	fs.DurationVar(&c.heartbeat, "heartbeat", c.heartbeat, "the fleet's reserve.Options.HeartbeatInterval: a seat holder not heard from for 3.5 of them is left out")
	return fs
}

// parse parses a command's args, flags before, between or after the
// positional arguments (a "--" ends the flags; an argument starting with
// '-' and a digit, such as a negative duration, is positional). It prints
// the command's usage on -h.
func (c *cli) parse(fs *flag.FlagSet, cmd string, args []string) ([]string, error) {
	var pos []string
	for len(args) > 0 {
		// Leading positionals (and negative numbers) are taken as they are.
		for len(args) > 0 && (!strings.HasPrefix(args[0], "-") || args[0] == "-" || isNegative(args[0])) {
			pos, args = append(pos, args[0]), args[1:]
		}
		if len(args) == 0 {
			break
		}
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				c.commandUsage(fs, cmd)
				return nil, errHelp
			}
			return nil, usagef("%s: %v (run \"pacer help %s\")", cmd, err, cmd)
		}
		rest := fs.Args()
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			return append(pos, rest...), nil
		}
		args = rest
	}
	return pos, nil
}

func isNegative(s string) bool {
	return len(s) > 1 && s[0] == '-' && s[1] >= '0' && s[1] <= '9'
}

func (c *cli) commandUsage(fs *flag.FlagSet, name string) {
	for _, cmd := range commands {
		if cmd.name == name {
			fmt.Fprintf(c.stdout, "Usage: pacer %s %s\n\n%s.\n\nFlags:\n", cmd.name, cmd.args, cmd.summary)
		}
	}
	fs.SetOutput(c.stdout)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// positionals checks the number of positional arguments: names are the
// required ones, optional how many more may follow.
func positionals(cmd string, pos []string, optional int, names ...string) error {
	if len(pos) < len(names) {
		return usagef("%s: missing %s (run \"pacer help %s\")", cmd, names[len(pos)], cmd)
	}
	if len(pos) > len(names)+optional {
		return usagef("%s: unexpected argument %q (run \"pacer help %s\")", cmd, pos[len(names)+optional], cmd)
	}
	for i, name := range names {
		if pos[i] == "" {
			return usagef("%s: empty %s", cmd, name)
		}
	}
	return nil
}

// oneLine makes a message one line for stderr.
func oneLine(s string) string {
	return strings.Join(strings.Fields(clean(s)), " ")
}
