package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pacer-go/pacer/admin"
	"github.com/pacer-go/pacer/internal/buildflags"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestUpgradeMixedVersions runs the previous release and the current code
// as separate processes on the same keys, through a rolling upgrade, the
// switch to state format 3, the switch back and a rollback, and checks
// that no process saw an error and that every band of both keys kept its
// limit over the whole run, on the slots as granted.
//
// The previous release is built from its commit (the first line of
// integration/upgrade/PREVIOUS) in a copy of it kept under the user's
// cache directory (buildPrevious), with upgrade/testdata/previous/main.go,
// the twin of cmd/upgradedriver written against that release's API.
//
// Its last part is the control: the format switched to 3 (forced) while a
// process of the previous release runs makes that process fail, as a
// release without the writer switch would: the check above can see it.
func TestUpgradeMixedVersions(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the previous release")
	}
	prevBin := buildPrevious(t)
	curBin := buildCurrent(t)
	s := redistest.New(t)
	prefix := redistest.Prefix(t)
	ctx := context.Background()
	adm, err := admin.New(s.Client, admin.Options{KeyPrefix: prefix})
	require.NoError(t, err)
	var procs []*driver
	start := func(bin, name string) *driver {
		d := startDriver(t, bin, name, s.URL, prefix, len(procs)+1)
		procs = append(procs, d)
		return d
	}
	step := func(what string, d time.Duration) {
		t.Logf("%s; %v", what, d)
		time.Sleep(d)
	}
	formats := func() admin.FormatStatus {
		st, err := adm.Format(ctx)
		require.NoError(t, err)
		return st
	}
	opts := func(why string) admin.FormatOptions {
		return admin.FormatOptions{Who: "upgrade_test", Reason: why, Wait: time.Minute, Progress: func(s string) { t.Log("format: " + s) }}
	}

	// The previous release alone, then a rolling upgrade: the current
	// code beside it writes format 2, which the previous release reads
	// (the fleet's setting is absent; the previous release writes format 1
	// then).
	old1, old2 := start(prevBin, "prev-1"), start(prevBin, "prev-2")
	step("two processes of the previous release", 2*time.Second)
	new1 := start(curBin, "cur-1")
	step("upgrade: one current process joins", time.Second)
	// An operator's pause and resume while both releases run: written
	// in format 2 too.
	require.NoError(t, adm.Pause(ctx, "lim", 300*time.Millisecond, "upgrade_test", "a pause mid-upgrade"))
	require.NoError(t, adm.Pause(ctx, "pol", time.Second, "upgrade_test", "a pause mid-upgrade"))
	step("both keys paused", 200*time.Millisecond)
	require.NoError(t, adm.Resume(ctx, "pol", "upgrade_test", "resumed"))
	old1.stop(t)
	step("one previous process leaves", time.Second)
	new2 := start(curBin, "cur-2")
	step("a second current process joins", time.Second)
	st := formats()
	require.Equal(t, 2, st.Setting)
	assert.Zero(t, st.Format3, "keys written in format 3 while the previous release runs")
	old2.stop(t)
	step("upgraded: only current processes", time.Second)

	// The switch to format 3, now that no member of the previous release
	// is left (they left the fleet on Close).
	_, err = adm.SetFormat(ctx, 3, opts("fleet upgraded"))
	require.NoError(t, err)
	waitWriters(t, adm, "3")
	step("every member writes format 3", 2*time.Second)
	// A key written once and idle since (an hourly quota's state lives to
	// the hour's end): only the switch back rewrites it.
	lim, err := reserve.New(s.Client, reserve.Options{KeyPrefix: prefix})
	require.NoError(t, err)
	hourly := reserve.Policy{{Name: "hourly", Window: reserve.Window{N: 100, Length: time.Hour}}}
	_, err = lim.ReserveN(ctx, reserve.Request{Key: "idle", Policy: hourly, Cost: reserve.Cost{"hourly": 1}})
	require.NoError(t, err)
	require.NoError(t, lim.Close())
	st = formats()
	require.Equal(t, 3, st.Format3, "every key in format 3 after the switch: %+v", st)

	// Back to format 2 before a rollback: every member switches, every
	// key is rewritten; then the previous release returns.
	ch, err := adm.SetFormat(ctx, 2, opts("rollback"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, ch.Rewritten, 1, "the idle key")
	st = formats()
	require.Equal(t, 3, st.Format1+st.Format2, "%+v", st)
	require.Zero(t, st.Format3, "%+v", st)
	old3 := start(prevBin, "prev-3")
	step("rollback: a previous process joins", time.Second)
	new1.stop(t)
	step("one current process leaves", time.Second)
	new2.stop(t)
	step("rolled back", time.Second)
	old3.stop(t)

	var grants []grant
	for _, d := range procs {
		if len(d.errors) > 0 {
			t.Errorf("%s: %d errors, first %q", d.name, len(d.errors), d.errors[0])
		}
		require.NotZero(t, d.grants, "%s: no slot granted", d.name)
		grants = append(grants, d.slots...)
		t.Logf("%s: %d slots", d.name, len(d.slots))
	}
	for _, v := range judgeUpgrade(grants) {
		t.Error(v)
	}

	// The control: format 3 while the previous release runs, if it cannot
	// read format 3.
	t.Run("control", func(t *testing.T) {
		if _, reads := previous(t); slices.Contains(reads, "3") {
			t.Skip("the previous release reads format 3")
		}
		prefix := redistest.Prefix(t)
		adm, err := admin.New(s.Client, admin.Options{KeyPrefix: prefix})
		require.NoError(t, err)
		old := startDriver(t, prevBin, "prev-control", s.URL, prefix, 10)
		cur := startDriver(t, curBin, "cur-control", s.URL, prefix, 11)
		time.Sleep(time.Second)
		_, err = adm.SetFormat(ctx, 3, admin.FormatOptions{Who: "upgrade_test", Reason: "too early"})
		require.ErrorIs(t, err, admin.ErrEarlierRelease, "a member of the previous release is in the fleet")
		_, err = adm.SetFormat(ctx, 3, admin.FormatOptions{Who: "upgrade_test", Reason: "too early", Force: true})
		require.NoError(t, err)
		time.Sleep(2 * time.Second)
		old.stop(t)
		cur.stop(t)
		require.Empty(t, cur.errors)
		require.NotEmpty(t, old.errors, "the previous release read format 3")
		require.Contains(t, old.errors[0], "PACER_WRONGTYPE")
		t.Logf("previous release, format 3 forced: %d errors, first %q", len(old.errors), old.errors[0])
	})
}

// waitWriters waits until every member of the fleet writes format f.
func waitWriters(t *testing.T, adm *admin.Client, f string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ms, err := adm.Fleet(context.Background())
		require.NoError(t, err)
		if !slices.ContainsFunc(ms, func(m admin.Member) bool { return m.Writes != f }) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("members do not write format %s after a minute: %+v", f, ms)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// repoRoot returns the root of the git checkout the test runs in; it skips
// the test (fails it under CI) without git or outside a checkout.
func repoRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("git rev-parse --show-toplevel: %v: the upgrade test builds the previous release from git", err)
		}
		t.Skipf("no git checkout (%v): the upgrade test builds the previous release from git", err)
	}
	return strings.TrimSpace(string(out))
}

// previous reads upgrade/PREVIOUS: the previous release's commit, and the
// state formats it reads ("reads 1", "reads 1 2", ...).
func previous(t *testing.T) (hash string, reads []string) {
	t.Helper()
	b, err := os.ReadFile("upgrade/PREVIOUS")
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	require.Len(t, lines, 2, "upgrade/PREVIOUS: a commit, then \"reads\" and the formats")
	f := strings.Fields(lines[1])
	require.True(t, len(f) >= 2 && f[0] == "reads", "upgrade/PREVIOUS: %q", lines[1])
	return strings.TrimSpace(lines[0]), f[1:]
}

// buildPrevious builds upgrade/testdata/previous/main.go against the
// previous release, in a copy of its commit (git archive) kept under the
// user's cache directory, named by the commit and the driver's hash: the
// build cache's keys hold a package's directory, so the previous release's
// packages compile once per machine instead of in every run. The copy is
// made whole in a directory beside it and renamed into place, so a run
// never builds half of one, and runs at once each keep the first.
func buildPrevious(t *testing.T) string {
	t.Helper()
	root := repoRoot(t)
	hash, _ := previous(t)
	src, err := os.ReadFile("upgrade/testdata/previous/main.go")
	require.NoError(t, err)
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = t.TempDir() // no cache to keep it in: this run's only
	}
	base := filepath.Join(cache, "pacer-test", "previous")
	dir := filepath.Join(base, fmt.Sprintf("%s-%x", hash, sha256.Sum256(src)))
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err != nil {
		require.NoError(t, os.MkdirAll(base, 0o755))
		tmp, err := os.MkdirTemp(base, ".tmp")
		require.NoError(t, err)
		defer os.RemoveAll(tmp) // gone once renamed
		// In two steps, not a pipe: a failed git archive must not leave an
		// empty copy marked whole.
		archive := filepath.Join(tmp, ".archive.tar")
		out, err := exec.Command("git", "-C", root, "archive", "-o", archive, hash).CombinedOutput()
		require.NoError(t, err, "git archive %s: %s", hash, out)
		out, err = exec.Command("tar", "-x", "-f", archive, "-C", tmp).CombinedOutput()
		require.NoError(t, err, "tar -x: %s", out)
		require.NoError(t, os.Remove(archive))
		require.NoError(t, os.MkdirAll(filepath.Join(tmp, "cmd", "upgradedriver"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(tmp, "cmd", "upgradedriver", "main.go"), src, 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(tmp, ".complete"), nil, 0o644))
		if err := os.Rename(tmp, dir); err != nil {
			if _, serr := os.Stat(filepath.Join(dir, ".complete")); serr != nil {
				t.Fatalf("keep the previous release's copy: %v", err)
			}
		}
	}
	bin := filepath.Join(t.TempDir(), "previous-driver")
	build := exec.Command("go", "build", "-o", bin, "./cmd/upgradedriver")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "build the previous release: %s", out)
	return bin
}

func buildCurrent(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "current-driver")
	// With the test binary's own flags (-race among them), so that the
	// build shares its compiled packages.
	args := append([]string{"build", "-o", bin}, buildflags.Same()...)
	out, err := exec.Command("go", append(args, "github.com/pacer-go/pacer/integration/cmd/upgradedriver")...).CombinedOutput()
	require.NoError(t, err, "build: %s", out)
	return bin
}

// A grant is one slot a driver printed.
type grant struct {
	key   string
	at    int64     // Unix ns
	costs []float64 // lim: permits; pol: requests, tokens
}

type driver struct {
	name   string
	cmd    *exec.Cmd
	out    bytes.Buffer
	errOut bytes.Buffer
	done   chan error

	slots  []grant
	grants int
	errors []string
}

func startDriver(t *testing.T, bin, name, url, prefix string, seed int) *driver {
	t.Helper()
	d := &driver{name: name, done: make(chan error, 1)}
	d.cmd = exec.Command(bin, "-redis", url, "-prefix", prefix, "-seed", strconv.Itoa(seed))
	d.cmd.Stdout, d.cmd.Stderr = &d.out, &d.errOut
	require.NoError(t, d.cmd.Start())
	go func() { d.done <- d.cmd.Wait() }()
	t.Cleanup(func() {
		if d.cmd.ProcessState == nil {
			_ = d.cmd.Process.Kill()
			<-d.done
		}
	})
	return d
}

// stop ends the driver (SIGTERM: it closes its Limiter, leaving the
// fleet) and reads what it printed.
func (d *driver) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, d.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-d.done:
		require.NoError(t, err, "%s: %s", d.name, d.errOut.String())
	case <-time.After(time.Minute):
		_ = d.cmd.Process.Kill()
		t.Fatalf("%s did not stop within a minute of SIGTERM", d.name)
	}
	sc := bufio.NewScanner(&d.out)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) >= 2 && f[0] == "error":
			d.errors = append(d.errors, sc.Text())
		case len(f) >= 5 && f[0] == "grant":
			at, err := strconv.ParseInt(f[2], 10, 64)
			require.NoError(t, err, sc.Text())
			if f[3] != "false" {
				d.errors = append(d.errors, "a local slot: "+sc.Text())
			}
			g := grant{key: f[1], at: at}
			for _, c := range f[4:] {
				v, err := strconv.ParseFloat(c, 64)
				require.NoError(t, err, sc.Text())
				g.costs = append(g.costs, v)
			}
			d.slots = append(d.slots, g)
			d.grants++
		default:
			t.Fatalf("%s printed %q", d.name, sc.Text())
		}
	}
}

// judgeUpgrade checks every band of the drivers' two keys on the slots
// granted (cmd/upgradedriver's policies): a bucket of rate r and burst b
// holds at most b + r*(t_j - t_i) units in the slots from t_i to t_j; a
// window holds at most its N.
func judgeUpgrade(grants []grant) []string {
	var out []string
	bucket := func(key, band string, unit int, rate, burst float64) {
		var gs []grant
		for _, g := range grants {
			if g.key == key && g.costs[unit] > 0 {
				gs = append(gs, g)
			}
		}
		slices.SortFunc(gs, func(a, b grant) int { return int(a.at - b.at) })
		worst := 0.0
		for i := range gs {
			sum := 0.0
			for j := i; j < len(gs); j++ {
				sum += gs[j].costs[unit]
				allowed := burst + rate*float64(gs[j].at-gs[i].at)/1e9
				if excess := sum - allowed; excess > 1e-6 && excess > worst {
					worst = excess
					out = append(out, fmt.Sprintf("%s band %s: %g units in the slots from %d to %d, %.6g allowed", key, band, sum, gs[i].at, gs[j].at, allowed))
				}
			}
		}
	}
	bucket("lim", "permits", 0, 40, 4)
	bucket("pol", "requests", 0, 30, 3)
	bucket("pol", "tokens", 1, 1500, 2000)
	windows := map[int64]float64{}
	for _, g := range grants {
		if g.key == "pol" {
			windows[g.at/2_000_000_000] += g.costs[0]
		}
	}
	for w, u := range windows {
		if u > 50+1e-9 {
			out = append(out, fmt.Sprintf("pol band per2s: %g requests in window %d, at most 50", u, w))
		}
	}
	if len(grants) == 0 {
		out = append(out, "no slot granted")
	}
	return out
}

// TestJudgeUpgrade: the upgrade test's judge sees each band's excess.
func TestJudgeUpgrade(t *testing.T) {
	const s = int64(time.Second)
	at := func(key string, ns int64, costs ...float64) grant {
		return grant{key: key, at: 1000*s + ns, costs: costs}
	}
	var ok []grant
	for i := range 4 {
		ok = append(ok, at("lim", 0, 1), at("lim", s/40*int64(i+1), 1))
	}
	ok = append(ok, at("pol", 0, 3, 2000), at("pol", s/30*3, 3, 0))
	require.Empty(t, judgeUpgrade(ok))

	require.Len(t, judgeUpgrade(append(ok, at("lim", 0, 1))), 1, "a fifth permit at once")
	require.Len(t, judgeUpgrade(append(ok, at("pol", 1, 0, 1))), 1, "a token over the burst")
	require.Len(t, judgeUpgrade(append(ok, at("pol", s/30*3, 1, 0))), 1, "a request early")
	var window []grant
	for i := range 51 {
		window = append(window, at("pol", s/10*int64(i)/3, 1, 0)) // 30/s, 51 in 1.7 s
	}
	v := judgeUpgrade(window)
	require.Len(t, v, 1)
	require.Contains(t, v[0], "per2s")
}
