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

	"github.com/pacer-go/pacer/internal/redisproc"
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
	// Others is the CPU time that processes other than this run's used
	// while it ran (the machine's user + system time from /proc/stat, less
	// this process's and its children's), over Elapsed; negative: unknown.
	Others, Elapsed time.Duration
	// Steal is the CPU time the hypervisor gave other guests while this
	// virtual machine wanted it (/proc/stat's steal), over the run;
	// negative: unknown. Nothing inside the machine shows it otherwise.
	Steal time.Duration

	start     machineCPU
	startOwn  time.Duration
	startTime time.Time
}

// machineCPU is read from /proc/stat.
type machineCPU struct {
	idle, total float64 // ticks: idle + iowait, and all
	busy        float64 // ticks: user + nice + system + irq + softirq
	steal       float64 // ticks taken by the hypervisor for other guests
	ok          bool
}

func readMachineCPU() machineCPU {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineCPU{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return machineCPU{}
	}
	var m machineCPU
	for i, s := range f[1:] {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return machineCPU{}
		}
		m.total += v
		switch i {
		case 0, 1, 2, 5, 6: // user, nice, system, irq, softirq (a process's
			// system time, as getrusage counts it, includes the softirq work
			// its network traffic causes)
			m.busy += v
		case 3, 4: // idle, iowait
			m.idle += v
		case 7:
			m.steal = v
		}
	}
	m.ok = true
	return m
}

// ticksPerSecond is USER_HZ, the unit of /proc/stat: 100 on Linux.
const ticksPerSecond = 100

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
		start:      readMachineCPU(),
		startOwn:   ownCPUTime(),
		startTime:  time.Now(),
	}
}

// readRedis asks the server its version.
func (e *environment) readRedis(ctx context.Context, rdb *redis.Client, source string) error {
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return err
	}
	e.Redis = redisproc.InfoField(info, "redis_version")
	e.RedisSource = source
	return nil
}

// finish records what is known only at the end, once every process the run
// started has ended.
func (e *environment) finish() {
	e.LoadEnd = loadAverage()
	e.Elapsed = time.Since(e.startTime)
	end, own := readMachineCPU(), ownCPUTime()
	e.Others, e.Steal = -1, -1
	if e.start.ok && end.ok {
		e.Steal = time.Duration((end.steal - e.start.steal) / ticksPerSecond * float64(time.Second))
	}
	if e.start.ok && end.ok && e.startOwn >= 0 {
		busy := time.Duration((end.busy - e.start.busy) / ticksPerSecond * float64(time.Second))
		e.Others = max(busy-(own-e.startOwn), 0)
	}
}

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
	a := readMachineCPU()
	time.Sleep(d)
	b := readMachineCPU()
	if !a.ok || !b.ok || b.total <= a.total {
		return -1
	}
	return (b.idle - a.idle) / (b.total - a.total)
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
