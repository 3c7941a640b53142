package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"sync"
	"time"
)

// observer is the local dashboard over one groups directory, read-only for
// group data, with a poller that turns cheap revision checks into live events.
type observer struct {
	http.Handler // routes, behind the middleware chain
	dir          string
	pollInterval time.Duration
	csrfToken    string
	hub          *eventHub
	dbs          *readOnlyPool
	location     *time.Location
	now          func() time.Time
	fsWarning    string // the network filesystem warning for dir, or ""

	reads *groupReadCache // the views' reads of unchanged groups

	// The poller's state, touched only by pollOnce on one goroutine at a time.
	markers     map[string]revisions
	signatures  map[string]groupSignature // at the last complete pollGroup
	latestAudit int64
	polled      bool // after the baseline poll, so that later ones publish news
}

// observerMemoryLimit is the dashboard's soft memory limit (GOMEMLIMIT
// overrides it): renders of hundreds of groups make tens of megabytes of
// garbage, and the limit, well above what stays live, collects it sooner.
const observerMemoryLimit = 40 << 20

// observePollInterval is how often the dashboard looks for changes unless
// --poll-interval says otherwise; idle groups cost two stats a poll.
const observePollInterval = 500 * time.Millisecond

// defaultObserverPort is tried first so that bookmarks keep working.
const defaultObserverPort = 8787

// observeOptions is the validated command line of "crosstalk-mcp observe".
type observeOptions struct {
	silent       bool
	port         int // 0 means "8787, else any free port"
	pollInterval time.Duration
	groupsDir    string
	demo         bool // show a temporary directory of demo agents instead
	keep         bool // with demo: leave the demo directory behind
}

// observeCommand is "crosstalk-mcp observe" with what it takes from the
// process around it, so that tests can run it without a browser or a signal.
type observeCommand struct {
	stdout, stderr io.Writer
	// groupsDir names the groups directory without --groups-dir.
	groupsDir func() (string, error)
	// openBrowser opens the address unless --silent, giving up when ctx ends.
	openBrowser func(ctx context.Context, url string) error
	// stopOn returns the context whose end stops the dashboard.
	stopOn func(context.Context) (context.Context, context.CancelFunc)
}

// openWithPlatform opens url with the platform's opener.
func openWithPlatform(ctx context.Context, url string) error {
	name, args := "xdg-open", []string{url}
	switch runtime.GOOS {
	case "darwin":
		name = "open"
	case "windows":
		name, args = "rundll32", []string{"url.dll,FileProtocolHandler", url}
	}
	// Output goes to /dev/null, not to pipes: Run would wait for a browser
	// the opener starts, as the browser inherits them.
	return exec.CommandContext(ctx, name, args...).Run()
}

// run serves the dashboard of opts until c.stopOn's context ends, and
// returns the exit status.
func (c observeCommand) run(opts observeOptions) int {
	fail := func(err error) int {
		fmt.Fprintf(c.stderr, "crosstalk-mcp observe: %v\n", err)
		return 1
	}
	// Signals are caught before a demo directory exists, so that one while
	// the demo seeds stops it and removes the directory too.
	ctx, stop := c.stopOn(context.Background())
	defer stop()
	dir, done, err := c.observeGroupsDir(ctx, opts)
	if err != nil && ctx.Err() != nil {
		return 0 // stopped as asked while the demo started
	} else if err != nil {
		return fail(err)
	}
	defer done()
	obs := newObserver(dir, opts.pollInterval, time.Now, time.Local)
	if obs.fsWarning != "" {
		fmt.Fprintln(c.stderr, "crosstalk-mcp observe: "+obs.fsWarning)
	}
	ln, fellBack, err := listenObserver(opts.port)
	if err != nil {
		return fail(err)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/", ln.Addr().(*net.TCPAddr).Port)
	fmt.Fprintln(c.stdout, url)
	if fellBack {
		fmt.Fprintf(c.stderr, "Port %d is unavailable; using %s\n", defaultObserverPort, url)
	}
	// Say it serves until interrupted, since a silent terminal looks hung.
	fmt.Fprintf(c.stderr, "Showing %s. Ctrl-C to stop.\n", dir)
	if _, set := os.LookupEnv("GOMEMLIMIT"); !set {
		debug.SetMemoryLimit(observerMemoryLimit)
	}
	// The opener ends with the dashboard: stop kills its command.
	var opening sync.WaitGroup
	defer func() { stop(); opening.Wait() }()
	if !opts.silent {
		opening.Go(func() {
			if err := c.openBrowser(ctx, url); err != nil && ctx.Err() == nil {
				fmt.Fprintf(c.stderr, "Could not open a browser; visit %s\n", url)
			}
		})
	}
	if err := obs.serve(ctx, ln); err != nil {
		return fail(err)
	}
	return 0
}

// listenObserver binds 127.0.0.1 only. Without an explicit port it prefers
// 8787 and falls back to an OS-chosen port; an explicit busy port fails.
func listenObserver(port int) (net.Listener, bool, error) {
	if port == 0 {
		if ln, err := net.Listen("tcp4", fmt.Sprintf("127.0.0.1:%d", defaultObserverPort)); err == nil {
			return ln, false, nil
		}
	}
	ln, err := net.Listen("tcp4", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return nil, false, fmt.Errorf("listen on 127.0.0.1:%d: %w", port, err)
	}
	return ln, port == 0, nil
}

// newObserver prepares a dashboard over dir without touching the directory.
// now is the clock the Tool analytics ranges end at; zone is where times
// are shown before the page's script shows them in the browser's zone.
func newObserver(dir string, pollInterval time.Duration, now func() time.Time, zone *time.Location) *observer {
	pageTemplates() // parse now, not during the first request
	if pollInterval <= 0 {
		pollInterval = observePollInterval
	}
	o := &observer{
		dir:          dir,
		pollInterval: pollInterval,
		csrfToken:    rand.Text(), // at least 128 random bits: no guess meets it
		hub:          &eventHub{subs: map[chan []byte]struct{}{}},
		dbs:          &readOnlyPool{entries: map[string]*readOnlyEntry{}},
		location:     zone,
		now:          now,
		markers:      map[string]revisions{},
		signatures:   map[string]groupSignature{},
		reads:        &groupReadCache{groups: map[string]*groupReads{}},
		fsWarning:    networkFSWarning(dir, os.Getenv),
	}
	o.Handler = o.routes()
	return o
}

// serve polls and serves on ln until ctx ends, then shuts down promptly even
// with event streams open.
func (o *observer) serve(ctx context.Context, ln net.Listener) error {
	// The baseline precedes any subscriber, so existing records are in the
	// snapshot rather than replayed as live events.
	o.pollOnce()
	// The header timeout stops an idle client pinning a connection; no
	// write timeout, because event streams are long-lived.
	srv := &http.Server{Handler: o, ReadHeaderTimeout: 10 * time.Second}
	pollCtx, stopPoll := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { o.pollLoop(pollCtx) })
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	stopPoll()
	// Closing the hub ends the event streams, which Shutdown would wait for.
	o.hub.close()
	// Two seconds is ample for in-flight renders; then connections are closed.
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		srv.Close()
	}
	wg.Wait()
	o.dbs.closeAll()
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return fmt.Errorf("serve dashboard: %w", serveErr)
	}
	return nil
}

// routes declares the dashboard's URLs: GET (and so HEAD) pages, and the
// Storage view's two POSTs behind the CSRF check; other methods get 405.
func (o *observer) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		o.renderPage(w, r, http.StatusOK, "dashboard", o.dashboardView(r))
	})
	for name, read := range o.panels() {
		mux.HandleFunc("GET /fragments/"+name, func(w http.ResponseWriter, r *http.Request) {
			o.renderPage(w, r, http.StatusOK, name, read(r))
		})
	}
	mux.HandleFunc("GET /events", o.serveEvents)
	mux.HandleFunc("GET /api/health", func(w http.ResponseWriter, r *http.Request) { // scripts' liveness probe
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		io.WriteString(w, `{"status":"ok"}`)
	})
	mux.Handle("GET /static/", staticHandler())
	mux.HandleFunc("GET /fragments/overview-group-row", o.serveOverviewGroupRow)
	mux.HandleFunc("GET /fragments/messages", o.serveMessages)
	mux.HandleFunc("GET /fragments/message", o.serveMessage)
	mux.Handle("POST /api/storage/reclaim", o.requireCSRF(http.HandlerFunc(o.serveReclaim)))
	mux.Handle("POST /api/storage/delete-history", o.requireCSRF(http.HandlerFunc(o.serveDeleteHistory)))
	return loopbackOnly(securityHeaders(mux))
}

// panels reads the view each /fragments/<name> serves, for template <name>.
func (o *observer) panels() map[string]func(*http.Request) any {
	return map[string]func(*http.Request) any{
		"overview":  func(r *http.Request) any { return o.overviewView(r.Context()) },
		"chats":     func(r *http.Request) any { return o.chatsView(r.Context(), r.URL.Query().Get("group_id")) },
		"chat":      func(r *http.Request) any { return o.chatView(r.Context(), r.URL.Query().Get("group_id")) },
		"analytics": func(r *http.Request) any { return o.analyticsView(r.Context(), r.URL.Query()) },
		"storage":   func(r *http.Request) any { return o.storageView(r.Context()) },
	}
}
