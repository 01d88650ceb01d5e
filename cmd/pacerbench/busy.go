package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"
)

// hogEnv makes this program, re-run with it set, a CPU hog: it spins until
// its stdin closes (see startHogs).
const hogEnv = "PACERBENCH_HOG"

// busyVariants are the limiters the busy phase runs again beside the hogs:
// pacer as the quick start builds it and tuned, and x/time/rate in process,
// per process at rate/procs and the floor.
var busyVariants = []string{
	"pacer",
	"pacer, quick-start client",
	"x/time/rate, rate/procs per process",
	"x/time/rate, one process (the floor)",
}

// hogs are CPU hogs beside a measurement.
type hogs struct {
	cmds  []*exec.Cmd
	stdin []io.WriteCloser
}

// startHogs starts n processes that each keep one CPU busy, until stop.
func startHogs(n int) (*hogs, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	h := &hogs{}
	for range n {
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), hogEnv+"=1")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		in, err := cmd.StdinPipe()
		if err == nil {
			err = cmd.Start()
		}
		if err != nil {
			h.stop()
			return nil, fmt.Errorf("pacerbench: starting a CPU hog: %w", err)
		}
		h.cmds, h.stdin = append(h.cmds, cmd), append(h.stdin, in)
	}
	return h, nil
}

// stop ends the hogs (their stdin closes; killed if they do not exit within
// a second) and waits for them.
func (h *hogs) stop() {
	for _, in := range h.stdin {
		in.Close()
	}
	for _, cmd := range h.cmds {
		t := time.AfterFunc(time.Second, func() { _ = cmd.Process.Kill() })
		_ = cmd.Wait()
		t.Stop()
	}
}

// runBusy runs the fleet of each of vs (those of busyVariants that were
// selected) again with c.BusyHogs CPU hogs beside it (one per CPU unless
// -busy-hogs says otherwise).
func (b *bench) runBusy(ctx context.Context, vs []variant, progress func(string, ...any)) ([]fleet, error) {
	var out []fleet
	for _, v := range vs {
		busy := false
		for _, name := range busyVariants {
			busy = busy || v.Name == name
		}
		if !busy {
			continue
		}
		h, err := startHogs(b.cfg.BusyHogs)
		if err != nil {
			return nil, err
		}
		r, err := b.runFleet(ctx, v)
		h.stop()
		if err != nil {
			return nil, err
		}
		progress("busy fleet  %-40s %.1f/s, busiest 100 ms %d, 1 s %d", v.Name, r.Rate, r.Busiest100ms, r.Busiest1s)
		out = append(out, r)
	}
	return out, nil
}
