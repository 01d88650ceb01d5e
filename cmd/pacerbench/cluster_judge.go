package main

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pacer-go/pacer/internal/layout"
	"github.com/pacer-go/pacer/reserve"
)

// clusterProc is what one cluster child printed (cluster_child.go).
type clusterProc struct {
	Cold     []int64   // cold admissions, Unix ns
	ColdKeys []int     // their keys, in the same order
	Judged   [][]int64 // fires by judged key, Unix ns
	// Slots are the slots those fires woke for (Unix ns, the same order),
	// Sources what granted them (reserve.Source), Lates how late Wait
	// says each woke.
	Slots    [][]int64
	Sources  [][]int
	Lates    [][]int64
	Errors   []clusterErr
	Switches []seamsEvent       // What: "1" to local pacing, "0" back on Redis
	Local    []int64            // local grants
	Failed   []clusterErr       // failed Redis calls: Kind is the operation
	CPU      [][2]int64         // Unix ns, CPU ns
	Ops      []map[string]int64 // the Redis calls by operation so far, at each CPU sample
	NewFails int                // New's failures before it worked
	NewError string             // the first's text
}

// clusterErr is a failed Wait (Kind "c" or "j") or Redis call (Kind the
// operation).
type clusterErr struct {
	At   int64
	Kind string
	Text string // the last text printed by this process
}

// readClusterChild parses a cluster child's lines.
func readClusterChild(lines []string, judged int) (clusterProc, error) {
	p := clusterProc{Judged: make([][]int64, judged), Slots: make([][]int64, judged), Sources: make([][]int, judged), Lates: make([][]int64, judged)}
	if len(lines) == 0 || lines[0] != "ready" {
		return p, errors.New("no ready line")
	}
	ended := false
	lastErr, lastFail := "", ""
	for _, line := range lines[1:] {
		if line == "end" {
			ended = true
			continue
		}
		f := strings.SplitN(line, " ", 4)
		if line[0] == 'j' {
			f = strings.Fields(line)
		}
		if len(f) < 2 || len(f[0]) != 1 {
			return p, fmt.Errorf("bad line %q", line)
		}
		at, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return p, fmt.Errorf("bad line %q", line)
		}
		arg := func(i int) string {
			if len(f) > i {
				return f[i]
			}
			return ""
		}
		switch f[0] {
		case "c":
			k, err := strconv.Atoi(arg(2))
			if err != nil {
				return p, fmt.Errorf("bad line %q", line)
			}
			p.Cold, p.ColdKeys = append(p.Cold, at), append(p.ColdKeys, k)
		case "j":
			i, err := strconv.Atoi(arg(2))
			if err != nil || i < 0 || i >= judged {
				return p, fmt.Errorf("bad line %q", line)
			}
			p.Judged[i] = append(p.Judged[i], at)
			if len(f) >= 6 {
				slot, err1 := strconv.ParseInt(f[3], 10, 64)
				src, err2 := strconv.Atoi(f[4])
				late, err3 := strconv.ParseInt(f[5], 10, 64)
				if err1 != nil || err2 != nil || err3 != nil {
					return p, fmt.Errorf("bad line %q", line)
				}
				p.Slots[i], p.Sources[i], p.Lates[i] = append(p.Slots[i], slot), append(p.Sources[i], src), append(p.Lates[i], late)
			}
		case "e":
			if t := strings.TrimSpace(arg(3)); t != "" {
				lastErr = t
			}
			p.Errors = append(p.Errors, clusterErr{at, arg(2), lastErr})
		case "x":
			if t := strings.TrimSpace(arg(3)); t != "" {
				lastFail = t
			}
			p.Failed = append(p.Failed, clusterErr{at, arg(2), lastFail})
		case "f":
			p.Switches = append(p.Switches, seamsEvent{at, arg(2)})
		case "l":
			p.Local = append(p.Local, at)
		case "n":
			if p.NewFails, err = strconv.Atoi(arg(2)); err != nil {
				return p, fmt.Errorf("bad line %q", line)
			}
			p.NewError = arg(3)
		case "u":
			cpu, err := strconv.ParseInt(arg(2), 10, 64)
			if err != nil {
				return p, fmt.Errorf("bad line %q", line)
			}
			ops := map[string]int64{}
			for _, f := range strings.Fields(strings.Join(f[min(3, len(f)):], " ")) {
				op, n, _ := strings.Cut(f, "=")
				if ops[op], err = strconv.ParseInt(n, 10, 64); err != nil {
					return p, fmt.Errorf("bad line %q", line)
				}
			}
			p.CPU = append(p.CPU, [2]int64{at, cpu})
			p.Ops = append(p.Ops, ops)
		default:
			return p, fmt.Errorf("bad line %q", line)
		}
	}
	if !ended {
		return p, errors.New("no end line")
	}
	return p, nil
}

// clusterSeg is one segment of a run.
type clusterSeg struct {
	Name     string
	From, To time.Time
	Nodes    []segNode

	Cold   int64   // cold admissions
	Judged []int64 // admissions of each judged key
	// Busiest is, for each judged key, the most fires in any window
	// [t, t+1 s) with t in the segment (windows that run past its end
	// included), and BusiestAt that t.
	Busiest   []int
	BusiestAt []time.Time
	// BusiestSlots is the same count of the slots those fires woke for:
	// the schedule pacer granted, before the machine delayed any caller.
	BusiestSlots []int
	// LocalFires counts each judged key's fires the local fallback
	// granted; LateFires its fires more than clusterLate after their slot
	// (a process the machine left off the CPU).
	LocalFires, LateFires []int

	ColdErrors, JudgedErrors int      // Wait errors returned to callers
	ErrProcs, ErrMax         int      // processes with one; the most in one process
	ErrTexts                 []string // distinct texts, a few
	Failed                   map[string]int
	FailTexts                []string
	ToLocal, ToRedis         int // switches, all processes
	LocalGrants              int
	// Client CPU, seconds per second: the processes' mean and the most.
	ClientCPU, ClientCPUMax float64
	// Ops is the fleet's Redis calls by operation, per second (from the
	// processes' samples in the segment).
	Ops map[string]float64
	// The fleet's records, sampled each second: the mean and the most of
	// the members silent for two heartbeat intervals (held by the others),
	// the most that said they paced locally, and the samples that failed.
	SilentMean               float64
	SilentMax, LocalMax      int
	FleetSamples, FleetFails int
}

// judge counts each segment's figures from the children's lines.
func (r *clusterRun) judge() {
	nj := len(r.Judged)
	fires, slots := make([][]int64, nj), make([][]int64, nj)
	for _, p := range r.Children {
		for i := range nj {
			fires[i] = append(fires[i], p.Judged[i]...)
			slots[i] = append(slots[i], p.Slots[i]...)
		}
	}
	for i := range fires {
		slices.Sort(fires[i])
		slices.Sort(slots[i])
	}
	for si := range r.Segments {
		s := &r.Segments[si]
		from, to := s.From.UnixNano(), s.To.UnixNano()
		in := func(t int64) bool { return from <= t && t < to }
		s.Judged, s.Busiest, s.BusiestAt = make([]int64, nj), make([]int, nj), make([]time.Time, nj)
		s.BusiestSlots, s.LocalFires, s.LateFires = make([]int, nj), make([]int, nj), make([]int, nj)
		for _, p := range r.Children {
			for i := range nj {
				for n, t := range p.Judged[i] {
					if !in(t) || n >= len(p.Slots[i]) {
						continue
					}
					if p.Sources[i][n] == int(reserve.SourceLocal) {
						s.LocalFires[i]++
					}
					if t-p.Slots[i][n] > int64(clusterLate) {
						s.LateFires[i]++
					}
				}
			}
		}
		for i, ts := range fires {
			s.BusiestSlots[i], _ = busiestFrom(slots[i], time.Second, from, to)
			n, at := busiestFrom(ts, time.Second, from, to)
			s.Busiest[i], s.BusiestAt[i] = n, time.Unix(0, at)
			for _, t := range ts {
				if in(t) {
					s.Judged[i]++
				}
			}
		}
		s.Failed, s.Ops = map[string]int{}, map[string]float64{}
		texts, fails := map[string]bool{}, map[string]bool{}
		var cpus []float64
		for _, p := range r.Children {
			for _, t := range p.Cold {
				if in(t) {
					s.Cold++
				}
			}
			errs := 0
			for _, e := range p.Errors {
				if !in(e.At) {
					continue
				}
				errs++
				if e.Kind == "j" {
					s.JudgedErrors++
				} else {
					s.ColdErrors++
				}
				if !texts[e.Text] && len(texts) < 3 {
					texts[e.Text] = true
					s.ErrTexts = append(s.ErrTexts, e.Text)
				}
			}
			if errs > 0 {
				s.ErrProcs++
				s.ErrMax = max(s.ErrMax, errs)
			}
			for _, e := range p.Failed {
				if !in(e.At) {
					continue
				}
				s.Failed[e.Kind]++
				if !fails[e.Text] && len(fails) < 4 {
					fails[e.Text] = true
					s.FailTexts = append(s.FailTexts, e.Kind+": "+e.Text)
				}
			}
			for _, sw := range p.Switches {
				if in(sw.At) {
					if sw.What == "1" {
						s.ToLocal++
					} else {
						s.ToRedis++
					}
				}
			}
			for _, t := range p.Local {
				if in(t) {
					s.LocalGrants++
				}
			}
			if c, ok := cpuRate(p.CPU, from, to); ok {
				cpus = append(cpus, c)
			}
			if a, b, ok := sampleSpan(p.CPU, from, to); ok {
				sec := float64(p.CPU[b][0]-p.CPU[a][0]) / 1e9
				for op, n := range p.Ops[b] {
					s.Ops[op] += float64(n-p.Ops[a][op]) / sec
				}
			}
		}
		silent := 0
		for _, f := range r.Fleet {
			if !in(f.At) {
				continue
			}
			s.FleetSamples++
			if f.Failed {
				s.FleetFails++
				continue
			}
			silent += f.Silent
			s.SilentMax, s.LocalMax = max(s.SilentMax, f.Silent), max(s.LocalMax, f.Local)
		}
		if n := s.FleetSamples - s.FleetFails; n > 0 {
			s.SilentMean = float64(silent) / float64(n)
		}
		if len(cpus) > 0 {
			var sum float64
			for _, c := range cpus {
				sum += c
			}
			s.ClientCPU, s.ClientCPUMax = sum/float64(len(cpus)), slices.Max(cpus)
		}
	}
}

// clusterLate is how long after its slot a judged call fires before the
// phase counts it late: the machine kept its process off the CPU.
const clusterLate = 10 * time.Millisecond

// busiestFrom returns the most of sorted (Unix ns) in any window [t, t+w)
// with from <= t < to, and that t (the earliest fire of such a window).
// A window that starts at a fire holds at least as many as any window
// that starts between two fires, so those are the windows counted.
func busiestFrom(sorted []int64, w time.Duration, from, to int64) (n int, at int64) {
	j := 0
	for i, t := range sorted {
		if t < from {
			continue
		}
		if t >= to {
			break
		}
		if j < i {
			j = i
		}
		for j < len(sorted) && sorted[j]-t < int64(w) {
			j++
		}
		if j-i > n {
			n, at = j-i, t
		}
	}
	if n == 0 {
		at = from
	}
	return n, at
}

// cpuRate returns the CPU seconds per second between the first sample at
// or after from and the last at or before to.
func cpuRate(samples [][2]int64, from, to int64) (float64, bool) {
	a, b, ok := sampleSpan(samples, from, to)
	if !ok {
		return 0, false
	}
	return float64(samples[b][1]-samples[a][1]) / float64(samples[b][0]-samples[a][0]), true
}

// sampleSpan returns the first sample at or after from and the last at or
// before to, if they are two.
func sampleSpan(samples [][2]int64, from, to int64) (a, b int, ok bool) {
	a, b = -1, -1
	for i, s := range samples {
		if s[0] >= from && a < 0 {
			a = i
		}
		if s[0] <= to {
			b = i
		}
	}
	return a, b, a >= 0 && b > a
}

// segment returns the segment named name, or nil.
func (r *clusterRun) segment(name string) *clusterSeg {
	for i := range r.Segments {
		if r.Segments[i].Name == name {
			return &r.Segments[i]
		}
	}
	return nil
}

// shardAdmissions counts the steady segment's admissions by master, with
// the masters' slots as planned at the start (the resharding comes later).
func (r *clusterRun) shardAdmissions(s *clusterSeg) map[string]int64 {
	out := map[string]int64{}
	owner := func(slot int) string {
		for _, m := range r.Masters {
			if m.Lo <= slot && slot <= m.Hi {
				return m.Addr
			}
		}
		return ""
	}
	slots := map[int]int{}
	from, to := s.From.UnixNano(), s.To.UnixNano()
	for _, p := range r.Children {
		for n, t := range p.Cold {
			if from <= t && t < to {
				k := p.ColdKeys[n]
				slot, ok := slots[k]
				if !ok {
					slot = keySlot(layout.Key(reserve.DefaultKeyPrefix, hostName(k)))
					slots[k] = slot
				}
				out[owner(slot)]++
			}
		}
	}
	for i, n := range s.Judged {
		out[owner(r.JudgedSlots[i])] += n
	}
	return out
}

// fleetMaster returns the address of the master that held the fleet's
// records at the start.
func (r *clusterRun) fleetMaster() string {
	for _, m := range r.Masters {
		if m.Lo <= r.FleetSlot && r.FleetSlot <= m.Hi {
			return m.Addr
		}
	}
	return ""
}

// sortedOps returns m's keys sorted.
func sortedOps(m map[string]int) []string { return slices.Sorted(maps.Keys(m)) }
