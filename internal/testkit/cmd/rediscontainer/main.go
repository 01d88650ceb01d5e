// Command rediscontainer starts a "redis:7" container with testcontainers-go
// (its redis module) for the root module's tests
// (internal/redistest.NewPreferContainer and New's Docker fallback), which
// run it as a child process so that the library's go.mod does not list
// testcontainers-go and the Docker client.
//
//	rediscontainer          # print the container's host:port; terminate it when stdin closes
//	rediscontainer -probe   # print "ok" if a Docker engine answers
//
// When no Docker engine answers, it prints "unavailable: <why>" instead and
// exits. testcontainers-go's own settings apply: DOCKER_HOST,
// TESTCONTAINERS_RYUK_DISABLED, TESTCONTAINERS_HOST_OVERRIDE,
// TESTCONTAINERS_HUB_IMAGE_NAME_PREFIX (which .ci/run points at a Redis
// image it builds locally).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/pacer-go/pacer/internal/testkit/internal/protocol"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	tcredis "github.com/testcontainers/testcontainers-go/modules/redis"
)

const (
	image        = "redis:7"
	port         = "6379/tcp"
	probeTimeout = 10 * time.Second
	startTimeout = 3 * time.Minute // pulling the image may take a while
	stopTimeout  = 5 * time.Second // before Docker kills the container
)

func main() {
	probe := flag.Bool("probe", false, `only check that a Docker engine answers: print "ok" or "unavailable: <why>"`)
	flag.Parse()
	if err := probeDocker(); err != nil {
		fmt.Println("unavailable: " + err.Error())
		return
	}
	if *probe {
		fmt.Println("ok")
		return
	}
	c, addr, err := start()
	if err != nil {
		terminate(c)
		protocol.Fail(err)
	}
	defer terminate(c)
	protocol.Serve(addr, nil)
}

// terminate stops and removes c, if not nil.
func terminate(c *tcredis.RedisContainer) {
	if c == nil {
		return
	}
	if err := testcontainers.TerminateContainer(c, testcontainers.StopTimeout(stopTimeout)); err != nil {
		fmt.Fprintf(os.Stderr, "rediscontainer: %v\n", err)
	}
}

// probeDocker returns nil if testcontainers-go can reach a Docker engine,
// or why not.
func probeDocker() (err error) {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("testcontainers panicked: %v", r)
		}
	}()
	p, err := testcontainers.ProviderDefault.GetProvider(testcontainers.WithLogger(tclog.NewNoopLogger()))
	if err != nil {
		return fmt.Errorf("no Docker engine is reachable: %w", err)
	}
	if err := p.Health(ctx); err != nil { // Health closes the provider
		return fmt.Errorf("no Docker engine is reachable: %w", err)
	}
	return nil
}

// start starts the container and returns it with its host:port. When the
// Docker daemon publishes ports on this machine, the container's port is
// bound to 127.0.0.1 only, and the address is 127.0.0.1's.
func start() (*tcredis.RedisContainer, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	var opts []testcontainers.ContainerCustomizer
	loopback := dockerPublishesOnLoopback(ctx)
	if loopback {
		opts = append(opts, testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			hc.PortBindings = network.PortMap{
				network.MustParsePort(port): {{HostIP: netip.MustParseAddr("127.0.0.1")}},
			}
		}))
	}
	c, err := tcredis.Run(ctx, image, opts...)
	if err != nil {
		return c, "", fmt.Errorf("start %s container: %w", image, err)
	}
	host, err := c.Host(ctx)
	if err != nil {
		return c, "", fmt.Errorf("%s container host: %w", image, err)
	}
	mapped, err := c.MappedPort(ctx, port)
	if err != nil {
		return c, "", fmt.Errorf("%s container port: %w", image, err)
	}
	if loopback { // "localhost" might resolve to ::1, where nothing listens
		host = "127.0.0.1"
	}
	if host == "" || mapped.Port() == "" {
		return c, "", errors.New("the container has no address")
	}
	return c, net.JoinHostPort(host, mapped.Port()), nil
}

// dockerPublishesOnLoopback reports whether the Docker daemon publishes
// container ports on this machine's localhost (a local socket, and this
// program not itself in a container, or TESTCONTAINERS_HOST_OVERRIDE set to
// localhost), where binding them to 127.0.0.1 works.
func dockerPublishesOnLoopback(ctx context.Context) bool {
	p, err := testcontainers.NewDockerProvider(testcontainers.WithLogger(tclog.NewNoopLogger()))
	if err != nil {
		return false
	}
	defer p.Close()
	host, err := p.DaemonHost(ctx)
	return err == nil && (host == "localhost" || host == "127.0.0.1")
}
