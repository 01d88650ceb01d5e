package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redisproc"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// childEnv marks a run of this test binary started by TestUnavailable.
const childEnv = "REDISTEST_CHILD"

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestNew(t *testing.T) {
	s := New(t)
	assert.Contains(t, []string{SourceURL, SourceProcess, SourceContainer}, s.Source)
	if url := os.Getenv("REDIS_URL"); url != "" {
		assert.Equal(t, SourceURL, s.Source)
		assert.Equal(t, url, s.URL)
	}
	checkServer(t, s)
}

// TestNewPreferContainer: a container whenever Docker answers, else what
// New gives.
func TestNewPreferContainer(t *testing.T) {
	s := NewPreferContainer(t)
	want := SourceContainer
	if err := dockerAvailable(); err != nil {
		want = New(t).Source
		t.Logf("no container: %v", err)
	}
	assert.Equal(t, want, s.Source)
	checkServer(t, s)
}

// checkServer writes a key through s.Client and reads it back through
// NewClient and through a client built from s.URL, as a child process would.
func checkServer(t *testing.T, s *Server) {
	t.Helper()
	t.Logf("source %s at %s (%s)", s.Source, s.Addr, s.URL)

	key := Prefix(t) + "k"
	t.Cleanup(func() { s.Client.Del(context.Background(), key) }) // the server may be shared
	require.NoError(t, s.Client.Set(ctx(t), key, "v", time.Minute).Err())
	got, err := s.Client.Get(ctx(t), key).Result()
	require.NoError(t, err)
	assert.Equal(t, "v", got)

	// Another client, and a client built from URL as a child process would.
	got, err = s.NewClient(t).Get(ctx(t), key).Result()
	require.NoError(t, err)
	assert.Equal(t, "v", got)
	opts, err := redis.ParseURL(s.URL)
	require.NoError(t, err)
	assert.Equal(t, s.Addr, opts.Addr)
	fromURL := redis.NewClient(opts)
	defer fromURL.Close()
	got, err = fromURL.Get(ctx(t), key).Result()
	require.NoError(t, err)
	assert.Equal(t, "v", got)
}

func TestNewGivesSeparateServersFromPath(t *testing.T) {
	a, b := New(t), New(t)
	if a.Source != SourceProcess {
		t.Logf("New uses %s; checking NewProcess instead", a.Source)
		a, b = NewProcess(t), NewProcess(t)
	}
	require.Equal(t, SourceProcess, a.Source)
	require.Equal(t, SourceProcess, b.Source)
	require.NotEqual(t, a.Addr, b.Addr)
	assert.Regexp(t, `^127\.0\.0\.1:\d+$`, a.Addr)

	require.NoError(t, a.Client.Set(ctx(t), "only-in-a", "1", 0).Err())
	assert.ErrorIs(t, b.Client.Get(ctx(t), "only-in-a").Err(), redis.Nil)

	// Each answers from its own process.
	pa, err := a.Client.Info(ctx(t), "server").Result()
	require.NoError(t, err)
	assert.Equal(t, fmt.Sprint(a.proc.Process().Pid()), redisproc.InfoField(pa, "process_id"))
}

func TestCleanupStopsProcess(t *testing.T) {
	var s *Server
	t.Run("server", func(t *testing.T) {
		s = NewProcess(t)
		require.NoError(t, s.Client.Ping(ctx(t)).Err())
	})
	if s == nil {
		t.Skip("the sub-test got no server")
	}
	assertStopped(t, s.Addr, s.proc.Process())
}

func TestNewCluster(t *testing.T) {
	var c *Cluster
	t.Run("cluster", func(t *testing.T) {
		start := time.Now()
		c = NewCluster(t, 3)
		t.Logf("3-master cluster %v ready in %v", c.Addrs, time.Since(start).Round(time.Millisecond))
		require.Len(t, c.Addrs, 3)
		checkCluster(t, c)
	})
	if c == nil {
		t.Skip("the sub-test got no cluster")
	}
	for _, addr := range c.Addrs {
		assertStopped(t, addr, c.proc.Node(addr).Process())
	}
}

func checkCluster(t *testing.T, c *Cluster) {
	prefix := Prefix(t)

	for _, addr := range c.Addrs {
		node := redis.NewClient(&redis.Options{Addr: addr})
		timeout, err := node.ConfigGet(ctx(t), "cluster-node-timeout").Result()
		node.Close()
		require.NoError(t, err)
		assert.Equal(t, "5000", timeout["cluster-node-timeout"], "on %s (NewCluster's, once formed)", addr)
	}

	// Find one hash tag per master.
	owners := map[string]string{} // master addr -> a key it owns
	for i := 0; len(owners) < len(c.Addrs) && i < 1000; i++ {
		key := fmt.Sprintf("%s{tag%d}", prefix, i)
		master, err := c.Client.MasterForKey(ctx(t), key)
		require.NoError(t, err)
		owners[master.Options().Addr] = key
	}
	require.Len(t, owners, len(c.Addrs), "keys with different hash tags should spread over every master")

	for addr, key := range owners {
		require.NoError(t, c.Client.Set(ctx(t), key, addr, 0).Err())

		// The key really lives on that node: it answers, the others redirect.
		for _, other := range c.Addrs {
			node := redis.NewClient(&redis.Options{Addr: other})
			err := node.Get(ctx(t), key).Err()
			node.Close()
			if other == addr {
				assert.NoError(t, err, "GET %s on its owner %s", key, addr)
			} else {
				assert.ErrorContains(t, err, "MOVED", "GET %s on %s", key, other)
			}
		}

		// Lua on two keys of the same slot works on every master.
		const script = `redis.call('SET', KEYS[1], ARGV[1]); redis.call('INCR', KEYS[2]); return redis.call('GET', KEYS[1])`
		counter := key + ":n" // same hash tag, same slot
		got, err := c.Client.Eval(ctx(t), script, []string{key, counter}, "lua").Result()
		require.NoError(t, err)
		assert.Equal(t, "lua", got)
		n, err := c.Client.Get(ctx(t), counter).Int()
		require.NoError(t, err)
		assert.Equal(t, 1, n)
	}

	// A script across slots is refused, as only a real cluster would.
	keys := make([]string, 0, len(owners))
	for _, k := range owners {
		keys = append(keys, k)
	}
	err := c.Client.Eval(ctx(t), `return 1`, keys[:2]).Err()
	assert.ErrorContains(t, err, "CROSSSLOT")

	// Another client sees the same data.
	other := c.NewClient(t)
	for addr, key := range owners {
		got, err := other.Get(ctx(t), key).Result()
		require.NoError(t, err)
		assert.Equal(t, "lua", got, "key on %s", addr)
	}
}

// assertStopped checks that a process started by a finished test has been
// stopped, reaped, and its directory removed.
func assertStopped(t *testing.T, addr string, p *redisproc.Process) {
	t.Helper()
	if conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
		conn.Close()
		t.Errorf("%s still accepts connections after its test ended", addr)
	}
	if !p.Exited() { // Exited: it has been reaped
		t.Errorf("process %d on %s still running after its test ended", p.Pid(), addr)
	}
	_, err := os.Stat(p.Dir())
	assert.True(t, errors.Is(err, os.ErrNotExist), "%s not removed: %v", p.Dir(), err)
}

func TestNewMiniredis(t *testing.T) {
	m, c := NewMiniredis(t)
	require.NoError(t, c.Set(ctx(t), "k", "v", time.Second).Err())
	got, err := c.Get(ctx(t), "k").Result()
	require.NoError(t, err)
	assert.Equal(t, "v", got)
	m.FastForward(2 * time.Second)
	assert.ErrorIs(t, c.Get(ctx(t), "k").Err(), redis.Nil)
}

// TestReport: with REDISTEST_REPORT set, each server handed out adds a line
// saying where it came from.
func TestReport(t *testing.T) {
	path := filepath.Join(t.TempDir(), "report")
	t.Setenv("REDISTEST_REPORT", path)
	var s *Server
	t.Run("server", func(t *testing.T) { s = New(t) })
	if s == nil {
		t.Skip("the sub-test got no server")
	}
	_, mc := NewMiniredis(t)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	want := fmt.Sprintf("%s TestReport/server %s server %s\n%s TestReport miniredis server %s\n",
		filepath.Base(os.Args[0]), s.Source, s.Addr, filepath.Base(os.Args[0]), mc.Options().Addr)
	assert.Equal(t, want, string(data))
}

func TestPrefix(t *testing.T) {
	a, b := Prefix(t), Prefix(t)
	assert.Regexp(t, `^pacertest:[0-9a-f]{8}:$`, a)
	assert.NotEqual(t, a, b)
}

// TestUnavailable runs this test binary again with no redis-server or
// redis-cli on PATH and no REDIS_URL, and checks that New and NewCluster
// skip, or fail when CI is set.
func TestUnavailable(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		return
	}
	cases := []struct {
		name string
		env  []string
	}{
		{"no Docker", []string{"REDISTEST_DOCKER=0"}},
	}
	if dockerProbeResult() != nil {
		// Without an engine the real probe is quick: exercise it too.
		cases = append(cases, struct {
			name string
			env  []string
		}{"Docker probe", nil})
	}
	for _, tc := range cases {
		t.Run(tc.name+"/skip", func(t *testing.T) {
			out, err := runChild(t, append(tc.env, "CI="))
			require.NoError(t, err, "output:\n%s", out)
			assert.Regexp(t, `--- SKIP: TestNoRedisChild/New \(`, out)
			for _, name := range []string{"NewPreferContainer", "NewCluster", "NewClusterReplicas", "NewSentinel"} {
				assert.Regexp(t, `--- SKIP: TestNoRedisChild/`+name+` \(`, out)
			}
			assert.Contains(t, out, "redis-server is not on PATH")
			assert.NotContains(t, out, "unreachable")
		})
		t.Run(tc.name+"/CI fails", func(t *testing.T) {
			out, err := runChild(t, append(tc.env, "CI=true"))
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "output:\n%s", out)
			assert.Regexp(t, `--- FAIL: TestNoRedisChild/New \(`, out)
			for _, name := range []string{"NewPreferContainer", "NewCluster", "NewClusterReplicas", "NewSentinel"} {
				assert.Regexp(t, `--- FAIL: TestNoRedisChild/`+name+` \(`, out)
			}
			assert.Contains(t, out, `CI="true" is set, so this is a failure, not a skip`)
			assert.NotContains(t, out, "unreachable")
		})
	}
}

// runChild runs TestNoRedisChild in a copy of this test binary with an empty
// PATH, no REDIS_URL and the given extra environment.
func runChild(t *testing.T, extra []string) (string, error) {
	env := []string{
		childEnv + "=1",
		"PATH=" + t.TempDir(),
		// A -race binary otherwise sleeps a second before exiting.
		strings.TrimSpace("GORACE=" + os.Getenv("GORACE") + " atexit_sleep_ms=0"),
	}
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "PATH", "REDIS_URL", "CI", "REDISTEST_DOCKER", "GORACE", childEnv:
		default:
			env = append(env, kv)
		}
	}
	cmd := exec.CommandContext(ctx(t), os.Args[0], "-test.run=^TestNoRedisChild$", "-test.v", "-test.count=1")
	cmd.Env = append(env, extra...)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("child ran in %v", time.Since(start).Round(time.Millisecond))
	return string(out), err
}

// TestNoRedisChild is the body of TestUnavailable's child runs; it does
// nothing in a normal run.
func TestNoRedisChild(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		return
	}
	t.Run("New", func(t *testing.T) {
		New(t)
		t.Error("unreachable: New returned without Redis")
	})
	t.Run("NewPreferContainer", func(t *testing.T) {
		NewPreferContainer(t)
		t.Error("unreachable: NewPreferContainer returned without Redis")
	})
	t.Run("NewCluster", func(t *testing.T) {
		NewCluster(t, 3)
		t.Error("unreachable: NewCluster returned without Redis")
	})
	t.Run("NewClusterReplicas", func(t *testing.T) {
		NewClusterReplicas(t, 3, 1)
		t.Error("unreachable: NewClusterReplicas returned without Redis")
	})
	t.Run("NewSentinel", func(t *testing.T) {
		NewSentinel(t)
		t.Error("unreachable: NewSentinel returned without Redis")
	})
}
