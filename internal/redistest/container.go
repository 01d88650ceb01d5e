package redistest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/launcher"
	"github.com/redis/go-redis/v9"
)

const (
	containerImage = "redis:7"
	dockerPing     = 2 * time.Second // how long a Docker socket has to answer
	// launchTimeout bounds the start of a launcher (see package
	// internal/launcher): the go command may build it first.
	launchTimeout = 5 * time.Minute
	// containerReady bounds the wait for a new container's published port
	// to answer PING: Docker's proxy can accept connections before Redis
	// listens. (The EOFs CI saw from the first containers of a run, even
	// after a PING had worked, were another matter: a killed dockerd's
	// leftover network namespaces on docker0 holding the same addresses,
	// which .ci/run now removes before it starts dockerd; see
	// clear_stale_bridge there.)
	containerReady = 30 * time.Second
)

// dockerProbeResult caches whether a Docker engine answered, once per test
// binary: asking costs a launcher's run.
var dockerProbeResult = sync.OnceValue(probeDocker)

// dockerAvailable returns nil if testcontainers-go can reach a Docker engine,
// or why not. It never panics, and never asks Docker with
// REDISTEST_DOCKER=0.
func dockerAvailable() error {
	if v := os.Getenv("REDISTEST_DOCKER"); v == "0" || v == "false" {
		return errors.New("the Docker fallback is disabled by REDISTEST_DOCKER=" + v)
	}
	return dockerProbeResult()
}

// containerRequired reports whether REDISTEST_DOCKER=require is set: then
// NewPreferContainer uses a container or fails, so that a run that has a
// Docker engine (.ci/run, when it could start one) proves the container
// path ran.
func containerRequired() bool { return os.Getenv("REDISTEST_DOCKER") == "require" }

// probeDocker first checks, with nothing but the standard library, that a
// Docker engine answers where testcontainers-go would look for one; only
// then does it ask testcontainers-go itself (internal/testkit's
// rediscontainer -probe), which costs a child process.
func probeDocker() error {
	if err := pingDocker(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), launchTimeout)
	defer cancel()
	c, err := launcher.Start(ctx, "rediscontainer", "-probe")
	if err != nil {
		return fmt.Errorf("the Docker probe failed: %w", err)
	}
	_ = c.Close()
	if c.First != "ok" {
		return errors.New(strings.TrimPrefix(c.First, "unavailable: "))
	}
	return nil
}

// pingDocker returns nil if a Docker engine answers GET /_ping at
// DOCKER_HOST, or, without it, at one of the sockets testcontainers-go
// tries (the default one and the rootless ones). Where testcontainers-go
// has settings of its own (~/.testcontainers.properties, a Docker context),
// it leaves the question to testcontainers-go and returns nil.
func pingDocker() error {
	home, _ := os.UserHomeDir()
	if host := os.Getenv("DOCKER_HOST"); host != "" {
		return ping(host)
	}
	if os.Getenv("DOCKER_CONTEXT") != "" || dockerContext(home) != "" {
		return nil
	}
	if _, err := os.Stat(filepath.Join(home, ".testcontainers.properties")); err == nil {
		return nil
	}
	socks := []string{"/var/run/docker.sock"}
	if xdg := os.Getenv("XDG_RUNTIME_DIR"); xdg != "" {
		socks = append(socks, filepath.Join(xdg, "docker.sock"), filepath.Join(xdg, ".docker", "run", "docker.sock"))
	}
	if home != "" {
		socks = append(socks, filepath.Join(home, ".docker", "run", "docker.sock"), filepath.Join(home, ".docker", "desktop", "docker.sock"))
	}
	socks = append(socks, fmt.Sprintf("/run/user/%d/docker.sock", os.Getuid()))
	var errs []error
	for _, s := range socks {
		err := ping("unix://" + s)
		if err == nil {
			return nil
		}
		errs = append(errs, err)
	}
	return fmt.Errorf("no Docker engine answers (DOCKER_HOST is unset): %w", errors.Join(errs...))
}

// dockerContext returns the Docker CLI's current context, if it is not the
// default one.
func dockerContext(home string) string {
	data, err := os.ReadFile(filepath.Join(home, ".docker", "config.json"))
	if err != nil {
		return ""
	}
	var cfg struct{ CurrentContext string }
	if json.Unmarshal(data, &cfg) != nil || cfg.CurrentContext == "default" {
		return ""
	}
	return cfg.CurrentContext
}

// ping sends GET /_ping to the Docker engine at host (unix:///path or
// tcp://host:port; TLS is not tried: a tcp host that accepts connections
// counts as an answer).
func ping(host string) error {
	u, err := url.Parse(host)
	if err != nil {
		return fmt.Errorf("DOCKER_HOST %q: %w", host, err)
	}
	switch u.Scheme {
	case "tcp":
		conn, err := net.DialTimeout("tcp", u.Host, dockerPing)
		if err != nil {
			return err
		}
		return conn.Close()
	case "unix":
	default:
		return nil // npipe, ssh...: for testcontainers-go to try
	}
	client := &http.Client{
		Timeout: dockerPing,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", u.Path)
		}},
	}
	defer client.CloseIdleConnections()
	resp, err := client.Get("http://docker/_ping")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: GET /_ping: %s", host, resp.Status)
	}
	return nil
}

// newContainer starts a redis:7 container for t (internal/testkit's
// rediscontainer, run as a child process) and terminates it on t.Cleanup.
// When the Docker daemon publishes ports on this machine, the container's
// port is bound to 127.0.0.1 only.
func newContainer(t testing.TB) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), launchTimeout)
	defer cancel()
	c, err := launcher.Start(ctx, "rediscontainer")
	if err != nil {
		t.Fatalf("redistest: start %s container: %v", containerImage, err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("redistest: %s container: %v", containerImage, err)
		}
	})
	if why, ok := strings.CutPrefix(c.First, "unavailable: "); ok {
		t.Fatalf("redistest: start %s container: %s", containerImage, why)
	}
	opts := &redis.Options{Addr: c.First}
	report(t, SourceContainer, "server", c.First)
	if err := awaitPing(opts, containerReady); err != nil {
		t.Fatalf("redistest: PING %s (from testcontainers %s) for %v: %v", c.First, containerImage, containerReady, err)
	}
	return &Server{
		Addr:   c.First,
		URL:    "redis://" + c.First + "/0",
		Source: SourceContainer,
		Client: newClient(t, opts, "testcontainers "+containerImage),
		opts:   opts,
	}
}

// awaitPing sends PING to opts.Addr until it is answered, for at most d,
// and returns the last error if it never is.
func awaitPing(opts *redis.Options, d time.Duration) error {
	o := *opts
	o.MaxRetries = -1
	c := redis.NewClient(&o)
	defer c.Close()
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}
