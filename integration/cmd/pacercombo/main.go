// Command pacercombo runs the combination runner (package
// integration/combo): seeded scenarios on a real redis-server, with a fleet
// of processes, operator actions, the provider's 429s and faults, each
// judged by an independent provider process.
//
//	go run ./integration/cmd/pacercombo -seeds 200   # seeds 1 to 200
//	go run ./integration/cmd/pacercombo -seed 17 -v  # replay seed 17, timeline and every violation
//	go run ./integration/cmd/pacercombo -cluster -seeds 20  # on a Redis Cluster of 3 masters
//
// It needs redis-server on PATH (and redis-cli with -cluster). It prints a line per seed and a summary;
// the exit status is 1 when any seed failed, 2 for bad arguments.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/pacer-go/pacer/integration/combo"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

func main() {
	combo.Main() // the fleet processes and the provider are this binary
	// go-redis's own dial errors while the scenarios stop Redis, at Debug:
	// off.
	redis.SetLogger(reserve.RedisLogger(slog.New(slog.NewTextHandler(os.Stderr, nil))))
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("pacercombo", flag.ContinueOnError)
	seeds := fs.Int("seeds", 10, "run seeds 1 to `N`")
	seed := fs.Uint64("seed", 0, "run only seed `S` (replay a failing seed)")
	verbose := fs.Bool("v", false, "print each seed's timeline and every violation")
	judge := fs.String("judge", "", "judge again the run saved in `FILE` by -dump, print its report and exit")
	dump := fs.String("dump", "", "write each seed's whole run (calls, notes, actions, verdict) as JSON to `DIR`/seed-S.json")
	cluster := fs.Bool("cluster", false, "run the seeds on a Redis Cluster of 3 masters (each Redis fault strikes one; no slow Redis, no Python processes)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "pacercombo: unexpected arguments %q\n", fs.Args())
		fs.Usage()
		return 2
	}
	if *judge != "" {
		return rejudge(*judge, *verbose)
	}
	seedSet := false
	fs.Visit(func(f *flag.Flag) { seedSet = seedSet || f.Name == "seed" })
	if seedSet && *seed == 0 {
		fmt.Fprintln(os.Stderr, "pacercombo: -seed 0: seeds start at 1")
		return 2
	}
	list := []uint64{*seed}
	if !seedSet {
		if *seeds < 1 {
			fmt.Fprintf(os.Stderr, "pacercombo: -seeds %d: want at least 1\n", *seeds)
			return 2
		}
		list = list[:0]
		for s := range uint64(*seeds) {
			list = append(list, s+1)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	sum := combo.Summary{Cluster: *cluster}
	for _, s := range list {
		if ctx.Err() != nil {
			break
		}
		cfg := combo.Config{Seed: s, Cluster: *cluster}
		if *verbose {
			cfg.Log = os.Stdout
		}
		res, err := combo.Run(ctx, cfg)
		if err != nil && ctx.Err() != nil {
			break // interrupted
		}
		if err != nil {
			fmt.Printf("seed %d: could not run: %v\n", s, err)
			sum.AddBroken(s, err)
			continue
		}
		fmt.Println(res.Progress())
		if *dump != "" {
			if err := writeDump(*dump, res); err != nil {
				fmt.Fprintf(os.Stderr, "pacercombo: -dump: %v\n", err)
				return 2
			}
		}
		if *verbose || res.Verdict.Failed() {
			res.WriteReport(os.Stdout, *verbose)
		}
		if res.Verdict.Failed() {
			fmt.Printf("  replay: %s\n", combo.ReplayCommand(s, *cluster))
		}
		sum.Add(res)
	}
	sum.Write(os.Stdout)
	if ctx.Err() != nil {
		fmt.Println("interrupted")
		return 1
	}
	if len(sum.Failing) > 0 || len(sum.Broken) > 0 {
		return 1
	}
	return 0
}

func writeDump(dir string, res *combo.Result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%d.json", res.Scenario.Seed)), b, 0o644)
}

// rejudge judges a run saved by -dump again (after a change to the
// verdict) and prints its report.
func rejudge(path string, verbose bool) int {
	b, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "pacercombo: -judge: %v\n", err)
		return 2
	}
	var res combo.Result
	if err := json.Unmarshal(b, &res); err != nil {
		fmt.Fprintf(os.Stderr, "pacercombo: -judge %s: %v\n", path, err)
		return 2
	}
	res.Verdict = combo.Judge(&res)
	fmt.Println(res.Progress())
	res.WriteReport(os.Stdout, verbose)
	if res.Verdict.Failed() {
		return 1
	}
	return 0
}
