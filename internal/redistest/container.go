package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/redis/go-redis/v9"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	tcredis "github.com/testcontainers/testcontainers-go/modules/redis"
)

const (
	containerImage = "redis:7"
	containerPort  = "6379/tcp"
	dockerProbe    = 3 * time.Second // how long to wait for a Docker engine to answer
	containerStart = 3 * time.Minute // pulling the image may take a while
)

// dockerProbeResult caches whether a Docker engine answered, once per test
// binary: asking costs up to dockerProbe each time when none does.
var dockerProbeResult = sync.OnceValue(probeDocker)

// dockerAvailable returns nil if testcontainers-go can reach a Docker engine,
// or why not. It never hangs for more than dockerProbe and never panics.
func dockerAvailable() error {
	if v := os.Getenv("REDISTEST_DOCKER"); v == "0" || v == "false" {
		return errors.New("the Docker fallback is disabled by REDISTEST_DOCKER=" + v)
	}
	return dockerProbeResult()
}

func probeDocker() error {
	ctx, cancel := context.WithTimeout(context.Background(), dockerProbe)
	defer cancel()
	res := make(chan error, 1) // buffered: a late answer must not block the goroutine
	go func() {
		defer func() {
			if r := recover(); r != nil {
				res <- fmt.Errorf("testcontainers panicked: %v", r)
			}
		}()
		p, err := testcontainers.ProviderDefault.GetProvider(testcontainers.WithLogger(tclog.NewNoopLogger()))
		if err != nil {
			res <- err
			return
		}
		res <- p.Health(ctx) // Health closes the provider
	}()
	select {
	case err := <-res:
		if err != nil {
			return fmt.Errorf("no Docker engine is reachable: %w", err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("no Docker engine answered within %v", dockerProbe)
	}
}

// newContainer starts a redis:7 container for t and terminates it on
// t.Cleanup. When the Docker daemon publishes ports on this machine, the
// container's port is bound to 127.0.0.1 only.
func newContainer(t testing.TB) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), containerStart)
	defer cancel()
	opts := []testcontainers.ContainerCustomizer{testcontainers.WithLogger(tclog.TestLogger(t))}
	loopback := dockerPublishesOnLoopback(ctx)
	if loopback {
		opts = append(opts, testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			hc.PortBindings = network.PortMap{
				network.MustParsePort(containerPort): {{HostIP: netip.MustParseAddr("127.0.0.1")}},
			}
		}))
	}
	c, err := tcredis.Run(ctx, containerImage, opts...)
	testcontainers.CleanupContainer(t, c) // a no-op if c is nil
	if err != nil {
		t.Fatalf("redistest: start %s container: %v", containerImage, err)
	}
	url, err := c.ConnectionString(ctx)
	if err != nil {
		t.Fatalf("redistest: %s container address: %v", containerImage, err)
	}
	ropts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("redistest: %s container address %q: %v", containerImage, url, err)
	}
	if loopback { // "localhost" might resolve to ::1, where nothing listens
		_, port, _ := net.SplitHostPort(ropts.Addr)
		ropts.Addr = net.JoinHostPort("127.0.0.1", port)
	}
	return &Server{
		Addr:      ropts.Addr,
		URL:       "redis://" + ropts.Addr + "/0",
		Source:    SourceContainer,
		Client:    newClient(t, ropts, "testcontainers "+containerImage),
		opts:      ropts,
		container: c,
	}
}

// dockerPublishesOnLoopback reports whether the Docker daemon publishes
// container ports on this machine's localhost (a local socket, and the tests
// not themselves in a container), where binding them to 127.0.0.1 works.
func dockerPublishesOnLoopback(ctx context.Context) bool {
	p, err := testcontainers.NewDockerProvider(testcontainers.WithLogger(tclog.NewNoopLogger()))
	if err != nil {
		return false
	}
	defer p.Close()
	host, err := p.DaemonHost(ctx)
	return err == nil && (host == "localhost" || host == "127.0.0.1")
}
