package main

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// environment is where and when a run happened.
type environment struct {
	Date        time.Time
	Command     string
	CPUs        int
	GOMAXPROCS  int
	Go          string // version, OS and architecture
	CPUModel    string // from /proc/cpuinfo, where there is one
	Commit      string // the pacer commit, when known
	Redis       string // redis_version from INFO server
	RedisSource string
	// The load average (1, 5, 15 minutes) before and after the run (after:
	// with this run's own processes), and how idle the CPUs were over the
	// second before it (-1: unknown): other work on the machine shows here,
	// and moves every figure.
	LoadStart, LoadEnd string
	IdleBefore         float64
}

func newEnvironment(c config) environment {
	return environment{
		Date:       time.Now().UTC(),
		Command:    c.Command,
		CPUs:       runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		Go:         runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH,
		CPUModel:   cpuModel(),
		Commit:     commit(),
		LoadStart:  loadAverage(),
		IdleBefore: idle(time.Second),
	}
}

// readRedis asks the server its version.
func (e *environment) readRedis(ctx context.Context, rdb *redis.Client, source string) error {
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return err
	}
	e.Redis = infoField(info, "redis_version")
	e.RedisSource = source
	return nil
}

// finish records what is known only at the end.
func (e *environment) finish() { e.LoadEnd = loadAverage() }

// loadAverage returns the first three fields of /proc/loadavg, or "unknown".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// idle returns the share of CPU time the machine spent idle over d, from
// /proc/stat, or -1.
func idle(d time.Duration) float64 {
	read := func() (idle, total float64, ok bool) {
		b, err := os.ReadFile("/proc/stat")
		if err != nil {
			return 0, 0, false
		}
		line, _, _ := strings.Cut(string(b), "\n")
		f := strings.Fields(line)
		if len(f) < 5 || f[0] != "cpu" {
			return 0, 0, false
		}
		for i, s := range f[1:] {
			v, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return 0, 0, false
			}
			total += v
			if i == 3 || i == 4 { // idle, iowait
				idle += v
			}
		}
		return idle, total, true
	}
	i0, t0, ok0 := read()
	time.Sleep(d)
	i1, t1, ok1 := read()
	if !ok0 || !ok1 || t1 <= t0 {
		return -1
	}
	return (i1 - i0) / (t1 - t0)
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// commit returns the VCS revision the binary was built from, or what git
// says about the working directory, or "".
func commit() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		rev, dirty := "", false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if rev != "" {
			if dirty {
				rev += " (modified)"
			}
			return rev
		}
	}
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		return ""
	}
	rev := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
		rev += " (with uncommitted changes)"
	}
	return rev
}
