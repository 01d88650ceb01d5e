package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// tokenEnv is the environment variable that gives pacer web -write its
// token when -token does not (a flag shows in the process list).
const tokenEnv = "PACER_WEB_TOKEN"

// minToken is the shortest token -write takes, in bytes.
const minToken = 16

// webOptions are pacer web's arguments, checked.
type webOptions struct {
	pattern  string
	addr     string
	expose   bool // -addr may be one other hosts reach
	write    bool
	token    string
	interval time.Duration
}

func (c *cli) web(ctx context.Context, args []string) error {
	fs := c.flagSet("web")
	var o webOptions
	fs.StringVar(&o.addr, "addr", "127.0.0.1:8080", "the address to serve on, host:port (port 0: a free one); a loopback address unless -expose")
	fs.BoolVar(&o.expose, "expose", false, "serve on an -addr other hosts can reach (not loopback): they see every key and the fleet, over plain HTTP")
	fs.BoolVar(&o.write, "write", false, "allow set, pause and resume from the page, each with the token (see -token) and recorded with who and why")
	fs.StringVar(&o.token, "token", "", "the token changes need, at least 16 characters (default $"+tokenEnv+", which the process list does not show)")
	fs.DurationVar(&o.interval, "interval", time.Second, "how often the page reads the keys: the span of its slots granted per second (100ms to 1m)")
	pos, err := c.parse(fs, "web", args)
	if err != nil {
		return err
	}
	if err := positionals("web", pos, 1); err != nil {
		return err
	}
	if len(pos) == 1 {
		o.pattern = pos[0]
	}
	if err := o.check(os.Getenv(tokenEnv)); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := c.connect(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // interrupted while connecting
		}
		return err
	}
	defer c.close()
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return fmt.Errorf("web: cannot serve on %s: %v", o.addr, err)
	}
	s := newWebServer(c, o)
	c.webBanner(ln.Addr(), o)
	err = serveWeb(ctx, ln, s.handler(), c.stderr)
	fmt.Fprintf(c.stdout, "pacer web: stopped\n")
	return err
}

// check checks o, taking the token from env when -token gave none.
func (o *webOptions) check(env string) error {
	if o.interval < 100*time.Millisecond || o.interval > time.Minute {
		return usagef("web: -interval %v: want 100ms to 1m", o.interval)
	}
	host, port, err := net.SplitHostPort(o.addr)
	if err != nil {
		return usagef("web: -addr %q: want host:port, such as 127.0.0.1:8080", o.addr)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return usagef("web: -addr %q: port %q: want a number from 0 (a free port) to 65535", o.addr, port)
	}
	if !isLoopback(host) && !o.expose {
		what := "host " + strconv.Quote(host)
		if host == "" {
			what = "every interface"
		}
		return usagef("web: -addr %q is %s, not a loopback address: other hosts could reach the view over plain HTTP; pass -expose to mean it (or keep 127.0.0.1 and reach it through an SSH tunnel)", o.addr, what)
	}
	if o.token == "" {
		o.token = env
	}
	if o.write {
		switch {
		case strings.TrimSpace(o.token) == "":
			return usagef("web: -write needs a token: set %s (or pass -token); the page asks for it before any change", tokenEnv)
		case len(o.token) < minToken:
			return usagef("web: the token has %d characters: want at least %d (openssl rand -hex 16 makes one)", len(o.token), minToken)
		}
	}
	return nil
}

// isLoopback says whether host (an -addr's or a request's) names this
// machine's loopback interface only.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// webBanner says where the view is and what it allows.
func (c *cli) webBanner(addr net.Addr, o webOptions) {
	host, port, _ := net.SplitHostPort(addr.String())
	exposed := !isLoopback(host)
	reach := "loopback only: other hosts cannot reach it (see -addr and -expose)"
	if exposed {
		reach = "EXPOSED (-expose): other hosts may reach it, over plain HTTP"
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1" // and every other address of this machine
	}
	pattern := o.pattern
	if pattern == "" {
		pattern = "*"
	}
	mode := "read-only: -write with a token (" + tokenEnv + ") allows set, pause and resume from the page"
	if o.write {
		mode = "CHANGES ALLOWED (-write): set, pause and resume, each with the token, recorded with who and why"
	}
	fmt.Fprintf(c.stdout, "pacer web: http://%s/\n", net.JoinHostPort(host, port))
	fmt.Fprintf(c.stdout, "  serving on %s, %s\n", addr, reach)
	fmt.Fprintf(c.stdout, "  keys %q under prefix %q of the Redis at %s, read every %v while a page is open\n", clean(pattern), clean(c.prefix), c.addr, o.interval)
	fmt.Fprintf(c.stdout, "  %s\n", mode)
	fmt.Fprintf(c.stdout, "  Ctrl-C or SIGTERM stops it\n")
	if exposed {
		fmt.Fprintf(c.stderr, "pacer: warning: the web view on %s is exposed beyond this machine: whoever reaches it sees every key and the fleet, and the token travels in clear; put it behind TLS and access control\n", addr)
	}
}

// serveWeb serves h on ln until ctx ends, then shuts the server down:
// requests in flight see their context end, and it returns once every
// handler and connection is done.
func serveWeb(ctx context.Context, ln net.Listener, h http.Handler, stderr io.Writer) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       time.Minute,
		MaxHeaderBytes:    16 << 10,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ErrorLog:          log.New(stderr, "pacer: web: ", 0),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("web: serving on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(sctx)
	if err != nil {
		_ = srv.Close()
	}
	<-served // http.ErrServerClosed
	if err != nil {
		return fmt.Errorf("web: shutting down: %w", err)
	}
	return nil
}

// webServer is pacer web's handlers: the page, the JSON API, and what it
// remembers between reads.
type webServer struct {
	c        *cli
	o        webOptions
	tokenSum [sha256.Size]byte

	mu     sync.Mutex // guards what follows, and serializes reads of Redis
	keys   map[string]*watchKey
	last   *webFrame
	lastAt time.Time

	outMu sync.Mutex // the log lines on stdout and stderr
}

func newWebServer(c *cli, o webOptions) *webServer {
	s := &webServer{c: c, o: o, keys: map[string]*watchKey{}}
	if o.write {
		s.tokenSum = sha256.Sum256([]byte(o.token))
	}
	return s
}

// logf writes one line to stdout (an accepted change) or stderr (a
// refused one).
func (s *webServer) logf(toErr bool, format string, args ...any) {
	s.outMu.Lock()
	defer s.outMu.Unlock()
	w := s.c.stdout
	if toErr {
		w = s.c.stderr
	}
	fmt.Fprintf(w, "pacer web: %s\n", oneLine(fmt.Sprintf(format, args...)))
}

// errReadOnly refuses a change to a server started without -write.
var errReadOnly = errors.New("read-only: this pacer web was started without -write")
