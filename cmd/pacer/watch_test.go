package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/pacer-go/pacer/admin"
	"github.com/pacer-go/pacer/reserve"
)

// hasSpark says whether s holds a sparkline rune.
func hasSpark(s string) bool { return strings.ContainsAny(s, string(sparkRunes)) }

// lastFrame is the text after the last home-and-clear of a screen, once
// it holds a whole frame (its fleet line).
func lastFrame(s string) (string, bool) {
	i := strings.LastIndex(s, escHome+escClear)
	if i < 0 {
		return "", false
	}
	f := s[i+len(escHome+escClear):]
	return f, strings.Contains(f, "fleet: ")
}

// TestWatchTerminal: on a terminal, watch draws each frame in place with
// ANSI escapes, one line per key with sparklines, and on SIGINT shows the
// cursor again and exits 0.
func TestWatchTerminal(t *testing.T) {
	f := newFixture(t)
	l := f.limiter()
	f.reserve(l, "api", reserve.Limit{Rate: 0.0001, Burst: 2}, 5)
	f.waitSource("api", "code")

	cmd := exec.Command(bin, append(f.global(), "watch", "-interval", "100ms")...)
	cmd.Env = append(f.env, "TERM=xterm")
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 30, Cols: 200})
	if err != nil {
		t.Fatal(err)
	}
	out, done := copyOut(ptmx)
	defer func() {
		_ = ptmx.Close()
		<-done
	}()
	screen := waitFor(t, "a frame with two samples of api", out, func(s string) bool {
		fr, ok := lastFrame(s)
		return ok && strings.Contains(fr, "\napi ") && !strings.Contains(fr, "n/a")
	})
	fr, _ := lastFrame(screen)
	if !strings.HasPrefix(screen, escAltScreen+escHide) {
		t.Errorf("the screen starts with %q, want the alternate screen and the cursor hidden", screen[:min(len(screen), 20)])
	}
	var line string
	for l := range strings.SplitSeq(fr, "\r\n") {
		if strings.HasPrefix(l, "api ") {
			line = l
		}
	}
	// Nothing reserves while it watches: 0 slots granted, a flat sparkline.
	if !hasSpark(line) || !strings.Contains(line, " 0.0 ") || !strings.Contains(line, "permits: 0.0001/s, burst 2 (code)") {
		t.Errorf("the key's line is %q; want 0.0 granted, sparklines and the limit", line)
	}
	if !strings.Contains(fr, "fleet: 1 Limiter, 1 on Redis, 0 pacing locally; last heard ") {
		t.Errorf("frame %q has no fleet line", fr)
	}

	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("watch after SIGINT: %v; want exit 0", err)
	}
	rest := waitFor(t, "the terminal restored", out, func(s string) bool {
		return strings.HasSuffix(s, escShow+escMainScree)
	})
	if tail := rest[len(screen):]; !strings.Contains(tail, escShow) {
		t.Errorf("after SIGINT watch wrote %q; want the cursor shown (%q)", tail, escShow)
	}
}

// TestWatchPipe: with stdout not a terminal, watch prints whole frames,
// one per interval, without escapes; -count stops it, and so does SIGTERM
// (exit 0).
func TestWatchPipe(t *testing.T) {
	f := newFixture(t)
	l := f.limiter()
	f.reserve(l, "api", reserve.Limit{Rate: 0.0001, Burst: 2}, 5)
	f.reserve(l, "other", reserve.Limit{Rate: 0.0001, Burst: 1}, 1)
	f.waitSource("api", "code")

	r := f.pacer("watch", "a*", "-interval", "100ms", "-count", "3")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("watch -count 3: exit %d, stderr %q", r.code, r.stderr)
	}
	if strings.Contains(r.stdout, "\x1b") {
		t.Errorf("watch to a pipe wrote escapes: %q", r.stdout)
	}
	const header = "pacer watch  prefix "
	frames := strings.Split(r.stdout, header)[1:]
	if !strings.HasPrefix(r.stdout, header) || len(frames) != 3 {
		t.Fatalf("watch -count 3 printed %d frames, want 3:\n%s", len(frames), r.stdout)
	}
	for i, fr := range frames {
		// A header, a blank line, the table, a blank line, the legend, the
		// fleet; then a blank line between frames.
		if !strings.HasSuffix(fr, "\n\n") {
			t.Errorf("frame %d does not end with a blank line: %q", i, fr)
		}
		lines := strings.Split(strings.TrimSuffix(fr, "\n\n"), "\n")
		if len(lines) != 7 || !strings.HasPrefix(lines[2], "KEY  GRANTED/s ") || !strings.HasPrefix(lines[3], "api ") ||
			lines[5] != strings.TrimSuffix(legend, "\n") ||
			!strings.HasPrefix(lines[6], "fleet: 1 Limiter, 1 on Redis, 0 pacing locally") {
			t.Errorf("frame %d is\n%s\nwant a header, the table with api alone, the legend, the fleet", i, fr)
		}
		if !hasSpark(lines[3]) {
			t.Errorf("frame %d: %q has no sparkline", i, lines[3])
		}
		if rate := strings.Fields(lines[3])[1]; (i == 0) != (rate == "n/a") {
			t.Errorf("frame %d: granted %q; want n/a in the first frame only", i, rate)
		}
	}

	cmd := exec.Command(bin, append(f.global(), "watch", "-interval", "100ms")...)
	cmd.Env = f.env
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out, done := copyOut(stdout)
	waitFor(t, "two frames", out, func(s string) bool { return strings.Count(s, "fleet: ") >= 2 })
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-done
	if err := cmd.Wait(); err != nil {
		t.Fatalf("watch after SIGTERM: %v; want exit 0", err)
	}
}

// TestWatchJSON: watch --json prints one JSON object per frame, one per
// line, on a terminal too.
func TestWatchJSON(t *testing.T) {
	f := newFixture(t)
	l := f.limiter()
	f.reserve(l, "api", reserve.Limit{Rate: 0.0001, Burst: 2}, 5)
	f.waitSource("api", "code")

	r := f.pacer("watch", "--json", "-interval", "100ms", "-count", "2")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("watch --json: exit %d, stderr %q", r.code, r.stderr)
	}
	sc := bufio.NewScanner(strings.NewReader(r.stdout))
	n := 0
	for sc.Scan() {
		var fr struct {
			Now  time.Time `json:"now"`
			Keys []struct {
				Key          string   `json:"key"`
				Reservations int64    `json:"reservations"`
				Admissions   *float64 `json:"admissions_per_s"`
			} `json:"keys"`
			Fleet []admin.Member `json:"fleet"`
		}
		if err := json.Unmarshal(sc.Bytes(), &fr); err != nil {
			t.Fatalf("line %d: %v: %s", n+1, err, sc.Text())
		}
		if len(fr.Keys) != 1 || fr.Keys[0].Key != "api" || fr.Keys[0].Reservations != 5 || len(fr.Fleet) != 1 || fr.Now.IsZero() {
			t.Errorf("line %d: %s; want api with its 5 reservations, one Limiter", n+1, sc.Text())
		}
		// Nothing reserves meanwhile: unknown in the first frame, 0 after.
		if a := fr.Keys[0].Admissions; (n == 0) != (a == nil) || (a != nil && *a != 0) {
			t.Errorf("line %d: admissions_per_s %v; want null, then 0", n+1, a)
		}
		n++
	}
	if n != 2 {
		t.Errorf("watch --json -count 2 printed %d lines, want 2:\n%s", n, r.stdout)
	}

	// On a terminal: still JSON lines, no escapes.
	cmd := exec.Command(bin, append(f.global(), "watch", "--json", "-interval", "100ms", "-count", "1")...)
	cmd.Env = f.env
	ptmx, err := pty.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	out, done := copyOut(ptmx)
	err = cmd.Wait()
	<-done // EIO once the child is gone
	_ = ptmx.Close()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	if s := out.String(); err != nil || strings.Contains(s, "\x1b") || !strings.HasPrefix(s, `{"now":`) {
		t.Errorf("watch --json on a terminal: %v, wrote %q; want one JSON line", err, s)
	}
}
