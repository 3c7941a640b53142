package main

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// observer is the local read-only dashboard: an HTTP handler over one groups
// directory, with a poller that turns cheap revision checks into live events.
type observer struct {
	dir          string
	pollInterval time.Duration
	csrfToken    string
	hub          *eventHub
	dbs          *readOnlyPool
	location     *time.Location
	now          func() time.Time
	static       http.Handler

	// poller state is touched only by pollOnce, which runs on one goroutine
	// at a time (the baseline before serving, then the poll loop).
	markers     map[string][4]int64
	latestAudit int64
	// polled is set once a poll has read every group and the audit id, so
	// later polls can tell news from the baseline.
	polled bool
}

// defaultObserverPort is tried first so bookmarks keep working; when it is
// busy an OS-chosen port is used instead.
const defaultObserverPort = 8787

// defaultPollInterval matches the original's refresh interval.
const defaultPollInterval = 500 * time.Millisecond

// observeOptions is the validated command line of "crosstalk-mcp observe".
type observeOptions struct {
	silent       bool
	port         int // 0 means "8787, else any free port"
	pollInterval time.Duration
	groupsDir    string
}

const observeUsage = "usage: crosstalk-mcp observe [-h] [--silent] [--port PORT] [--poll-interval SECONDS] [--groups-dir PATH]\n"

const observeHelp = observeUsage + `
Open Crosstalk's local observability dashboard.

options:
  -h, --help            show this help message and exit
  --silent              do not open a browser automatically
  --port PORT           bind exactly this loopback port
  --poll-interval SECONDS
                        observer refresh interval in seconds (default: 0.5)
  --groups-dir PATH     directory containing Crosstalk group databases
`

// errObserveHelp reports that --help was requested and printed.
var errObserveHelp = errors.New("help requested")

// parseObserveOptions parses the observer's options the way the original's
// argparse parser does, including "--opt=value" forms.
func parseObserveOptions(args []string) (observeOptions, error) {
	opts := observeOptions{pollInterval: defaultPollInterval}
	for i := 0; i < len(args); i++ {
		arg := args[i]
		name, value, hasValue := strings.Cut(arg, "=")
		if !strings.HasPrefix(arg, "--") {
			hasValue = false
			name = arg
		}
		takeValue := func() (string, error) {
			if hasValue {
				return value, nil
			}
			if i+1 >= len(args) || (strings.HasPrefix(args[i+1], "-") && len(args[i+1]) > 1 && !isNumber(args[i+1])) {
				return "", fmt.Errorf("argument %s: expected one argument", name)
			}
			i++
			return args[i], nil
		}
		switch name {
		case "-h", "--help":
			return opts, errObserveHelp
		case "--silent":
			if hasValue {
				return opts, fmt.Errorf("argument --silent: ignored explicit argument '%s'", value)
			}
			opts.silent = true
		case "--port":
			v, err := takeValue()
			if err != nil {
				return opts, err
			}
			port, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || port < 1 || port > 65535 {
				return opts, errors.New("argument --port: port must be an integer between 1 and 65535")
			}
			opts.port = port
		case "--poll-interval":
			v, err := takeValue()
			if err != nil {
				return opts, err
			}
			seconds, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil || math.IsNaN(seconds) || math.IsInf(seconds, 0) || seconds <= 0 {
				return opts, errors.New("argument --poll-interval: poll interval must be a finite positive number of seconds")
			}
			// The ticker needs a representable, non-zero duration.
			switch nanos := seconds * float64(time.Second); {
			case nanos >= math.MaxInt64:
				opts.pollInterval = time.Duration(math.MaxInt64)
			case nanos < float64(time.Millisecond):
				opts.pollInterval = time.Millisecond
			default:
				opts.pollInterval = time.Duration(nanos)
			}
		case "--groups-dir":
			v, err := takeValue()
			if err != nil {
				return opts, err
			}
			opts.groupsDir = v
		default:
			return opts, fmt.Errorf("unrecognized arguments: %s", strings.Join(args[i:], " "))
		}
	}
	return opts, nil
}

// isNumber reports whether s parses as a number, so "--port -1" reads -1 as
// the value (and rejects it) rather than as a missing argument.
func isNumber(s string) bool {
	_, err := strconv.ParseFloat(s, 64)
	return err == nil
}

// resolveObserveGroupsDir picks the groups directory from the flag, then the
// environment, then the default. It never creates the directory.
func resolveObserveGroupsDir(opts observeOptions) (string, error) {
	if opts.groupsDir != "" {
		return opts.groupsDir, nil
	}
	return groupsDirFromEnv()
}

// openBrowser opens url with the platform's opener. Tests replace it.
var openBrowser = func(url string) error {
	var cmd *exec.Cmd
	switch runtime.GOOS {
	case "darwin":
		cmd = exec.Command("open", url)
	case "windows":
		cmd = exec.Command("rundll32", "url.dll,FileProtocolHandler", url)
	default:
		cmd = exec.Command("xdg-open", url)
	}
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	return cmd.Run()
}

// observeSignals is the set of signals that stop the observer; tests replace
// the notifier to stop it without a real signal.
var observeSignals = func(ctx context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
}

// runObserve runs "crosstalk-mcp observe" until interrupted and returns the
// exit status.
func runObserve(args []string, stdout, stderr io.Writer) int {
	opts, err := parseObserveOptions(args)
	if errors.Is(err, errObserveHelp) {
		fmt.Fprint(stdout, observeHelp)
		return 0
	}
	if err != nil {
		fmt.Fprint(stderr, observeUsage)
		fmt.Fprintf(stderr, "crosstalk-mcp observe: error: %v\n", err)
		return 2
	}
	dir, err := resolveObserveGroupsDir(opts)
	if err != nil {
		fmt.Fprintf(stderr, "crosstalk-mcp observe: %v\n", err)
		return 1
	}
	ln, fellBack, err := listenObserver(opts.port)
	if err != nil {
		fmt.Fprintf(stderr, "crosstalk-mcp observe: %v\n", err)
		return 1
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/", ln.Addr().(*net.TCPAddr).Port)
	fmt.Fprintln(stdout, url)
	if fellBack {
		fmt.Fprintf(stderr, "Port %d is unavailable; using %s\n", defaultObserverPort, url)
	}
	if !opts.silent {
		go func() {
			if err := openBrowser(url); err != nil {
				fmt.Fprintf(stderr, "Could not open a browser; visit %s\n", url)
			}
		}()
	}
	obs, err := newObserver(dir, opts.pollInterval)
	if err != nil {
		ln.Close()
		fmt.Fprintf(stderr, "crosstalk-mcp observe: %v\n", err)
		return 1
	}
	ctx, stop := observeSignals(context.Background())
	defer stop()
	if err := obs.serve(ctx, ln); err != nil {
		fmt.Fprintf(stderr, "crosstalk-mcp observe: %v\n", err)
		return 1
	}
	return 0
}

// listenObserver binds 127.0.0.1 only. Without an explicit port it prefers
// 8787 and falls back to an OS-chosen port; an explicit busy port fails.
func listenObserver(port int) (net.Listener, bool, error) {
	if port != 0 {
		ln, err := net.Listen("tcp4", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			return nil, false, fmt.Errorf("listen on 127.0.0.1:%d: %w", port, err)
		}
		return ln, false, nil
	}
	if ln, err := net.Listen("tcp4", fmt.Sprintf("127.0.0.1:%d", defaultObserverPort)); err == nil {
		return ln, false, nil
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return nil, false, fmt.Errorf("listen on 127.0.0.1: %w", err)
	}
	return ln, true, nil
}

// newObserver prepares a dashboard over dir without touching the directory.
func newObserver(dir string, pollInterval time.Duration) (*observer, error) {
	pageTemplates() // parse now, not during the first request
	token := make([]byte, 32)
	if _, err := rand.Read(token); err != nil {
		return nil, fmt.Errorf("generate csrf token: %w", err)
	}
	if pollInterval <= 0 {
		pollInterval = defaultPollInterval
	}
	return &observer{
		dir:          dir,
		pollInterval: pollInterval,
		csrfToken:    base64.RawURLEncoding.EncodeToString(token),
		hub:          newEventHub(),
		dbs:          newReadOnlyPool(),
		location:     time.Local,
		now:          time.Now,
		static:       staticHandler(),
		markers:      map[string][4]int64{},
	}, nil
}

// serve polls and serves on ln until ctx ends, then shuts down promptly even
// with event streams open.
func (o *observer) serve(ctx context.Context, ln net.Listener) error {
	// The baseline comes before any client can subscribe, so existing records
	// are represented by the snapshot rather than replayed as live events.
	o.pollOnce()
	// The header timeout stops an idle local client from pinning a
	// connection; no write timeout, because event streams are long-lived.
	srv := &http.Server{
		Handler:           o,
		ReadHeaderTimeout: 10 * time.Second,
	}
	pollCtx, stopPoll := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		o.pollLoop(pollCtx)
	}()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	stopPoll()
	// Closing the hub ends every event stream first; otherwise Shutdown
	// would wait for those never-idle connections until its deadline.
	o.hub.close()
	// Two seconds is ample for in-flight fragment renders; after that the
	// remaining connections are closed so Ctrl-C always ends promptly.
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

// pollLoop polls every interval until ctx ends.
func (o *observer) pollLoop(ctx context.Context) {
	ticker := time.NewTicker(o.pollInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			o.pollOnce()
		}
	}
}

// pollOnce compares each group's revision counters and the newest audit id
// with the previous poll and publishes one event per change. A group that
// cannot be read right now (locked, half-written) is skipped and compared
// again next time, so nothing is lost.
func (o *observer) pollOnce() {
	ids, dirExists := discoverGroups(o.dir)
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		seen[id] = true
		marker, err := o.dbs.groupRevisions(o.dir, id)
		if err != nil {
			continue
		}
		prev, known := o.markers[id]
		if !known {
			o.markers[id] = marker
			// A group that appears after the baseline is news to open pages.
			if o.polled {
				o.hub.publish("group.changed", map[string]any{"group_id": id})
			}
			continue
		}
		if marker[0] != prev[0] {
			latest, err := o.dbs.latestMessageID(o.dir, id)
			if err != nil {
				continue
			}
			o.hub.publish("message.created", map[string]any{"group_id": id, "message_id": latest})
		}
		o.markers[id] = marker
		if marker[1] != prev[1] {
			o.hub.publish("member.changed", map[string]any{"group_id": id})
		}
		if marker[2] != prev[2] {
			o.hub.publish("wakeup.changed", map[string]any{"group_id": id})
		}
		if marker[3] != prev[3] {
			o.hub.publish("group.changed", map[string]any{"group_id": id})
		}
	}
	// A missing directory can be a remount in progress; only a missing file
	// in an existing directory means the group was deleted.
	if dirExists {
		for id := range o.markers {
			if !seen[id] {
				delete(o.markers, id)
				o.dbs.forget(groupPath(o.dir, id))
				o.hub.publish("group.deleted", map[string]any{"group_id": id})
			}
		}
	}
	latest, ok, err := o.dbs.latestAuditID(o.dir)
	if err != nil {
		return
	}
	if o.polled && ok && latest != o.latestAudit {
		o.hub.publish("tool_call.completed", map[string]any{"tool_call_id": latest})
	}
	// latestAuditID returns 0 whenever ok is false.
	o.latestAudit = latest
	o.polled = true
}

// snapshot is sent first on every event stream so a (re)connecting browser
// can reconcile what it shows without replaying history.
func (o *observer) snapshot() map[string]any {
	groups := map[string]any{}
	ids, _ := discoverGroups(o.dir)
	for _, id := range ids {
		marker, err := o.dbs.groupRevisions(o.dir, id)
		if err != nil {
			continue
		}
		latest, err := o.dbs.latestMessageID(o.dir, id)
		if err != nil {
			continue
		}
		groups[id] = map[string]any{
			"latest_message_id":  latest,
			"member_fingerprint": strconv.FormatInt(marker[1], 10),
			"wakeup_fingerprint": strconv.FormatInt(marker[2], 10),
		}
	}
	var audit any
	if latest, ok, err := o.dbs.latestAuditID(o.dir); err == nil && ok {
		audit = latest
	}
	return map[string]any{"groups": groups, "latest_audit_id": audit}
}

// allowedHost reports whether a Host (or Origin host) names this machine's
// loopback interface; anything else may be a DNS-rebinding page.
func allowedHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	switch strings.ToLower(host) {
	case "127.0.0.1", "localhost", "::1":
		return true
	}
	return false
}

// contentSecurityPolicy allows only this origin: no inline script or style,
// no third-party connection, no framing.
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; worker-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; " +
	"form-action 'self'; frame-ancestors 'none'"

// ServeHTTP routes the dashboard's URLs, which are the original's so that
// bookmarks and scripts keep working.
func (o *observer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !allowedHost(r.Host) {
		http.Error(w, "Forbidden: the observer only answers loopback host names.", http.StatusForbidden)
		return
	}
	h := w.Header()
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	path := r.URL.Path
	if path == "/api/storage/reclaim" || path == "/api/storage/delete-history" {
		o.serveStorageAction(w, r)
		return
	}
	// Everything else, static assets included, is read-only.
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "Method not allowed.", http.StatusMethodNotAllowed)
		return
	}
	if strings.HasPrefix(path, "/static/") {
		o.static.ServeHTTP(w, r)
		return
	}
	q := r.URL.Query()
	switch path {
	case "/":
		o.renderPage(w, r, http.StatusOK, "dashboard", o.dashboardView(r.Context()))
	case "/events":
		o.serveEvents(w, r)
	case "/api/health":
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		io.WriteString(w, `{"status":"ok"}`)
	case "/fragments/overview":
		o.renderPage(w, r, http.StatusOK, "overview", o.overviewView(r.Context()))
	case "/fragments/overview-group-row":
		id := q.Get("group_id")
		if validateGroupID(id) != nil {
			o.renderPage(w, r, http.StatusBadRequest, "empty", nil)
			return
		}
		row, ok := o.overviewGroupRow(r.Context(), id)
		if !ok {
			o.renderPage(w, r, http.StatusOK, "empty", nil)
			return
		}
		o.renderPage(w, r, http.StatusOK, "overview-group-row", row)
	case "/fragments/chats":
		o.renderPage(w, r, http.StatusOK, "chats", o.chatsView(r.Context(), q.Get("group_id")))
	case "/fragments/chat":
		o.renderPage(w, r, http.StatusOK, "chat", o.chatView(r.Context(), q.Get("group_id")))
	case "/fragments/messages":
		var cursor int64
		if raw, ok := q["older_than_message_id"]; ok {
			v, err := strconv.ParseInt(strings.TrimSpace(raw[0]), 10, 64)
			if err != nil || v < 1 {
				o.renderPage(w, r, http.StatusBadRequest, "notice", noticeView{Error: true, Text: "Invalid message cursor."})
				return
			}
			cursor = v
		}
		o.renderPage(w, r, http.StatusOK, "messages", o.messagePageView(r.Context(), q.Get("group_id"), cursor))
	case "/fragments/message":
		id, err := strconv.ParseInt(strings.TrimSpace(q.Get("message_id")), 10, 64)
		if err != nil || id < 1 {
			o.renderPage(w, r, http.StatusBadRequest, "notice", noticeView{Error: true, Text: "Message is unavailable."})
			return
		}
		view := o.singleMessageView(r.Context(), q.Get("group_id"), id)
		o.renderPage(w, r, http.StatusOK, "single-message", view)
	case "/fragments/analytics":
		o.renderPage(w, r, http.StatusOK, "analytics", o.analyticsView(r.Context(), q))
	case "/fragments/storage":
		o.renderPage(w, r, http.StatusOK, "storage", o.storageView(r.Context()))
	default:
		http.NotFound(w, r)
	}
}

// serveStorageAction runs one of the two audit-maintenance POSTs after the
// CSRF token (and, for deletion, the explicit confirmation) check out.
func (o *observer) serveStorageAction(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		http.Error(w, "Method not allowed.", http.StatusMethodNotAllowed)
		return
	}
	if origin := r.Header.Get("Origin"); origin != "" && origin != "null" {
		host := strings.TrimPrefix(strings.TrimPrefix(origin, "http://"), "https://")
		if !allowedHost(host) {
			o.renderPage(w, r, http.StatusForbidden, "notice", noticeView{Error: true, Text: "Maintenance request rejected: cross-origin request."})
			return
		}
	}
	token := r.Header.Get("X-CSRF-Token")
	if token == "" || subtle.ConstantTimeCompare([]byte(token), []byte(o.csrfToken)) != 1 {
		o.renderPage(w, r, http.StatusForbidden, "notice", noticeView{Error: true, Text: "Maintenance request rejected: invalid CSRF token."})
		return
	}
	var msg string
	var err error
	if r.URL.Path == "/api/storage/delete-history" {
		if r.Header.Get("X-Crosstalk-Confirm") != "DELETE AUDIT HISTORY" {
			o.renderPage(w, r, http.StatusBadRequest, "notice", noticeView{Error: true, Text: "Audit-history deletion requires explicit confirmation."})
			return
		}
		msg, err = deleteAuditHistory(r.Context(), o.dir)
	} else {
		msg, err = reclaimAuditSpace(r.Context(), o.dir, 100)
	}
	if err != nil {
		o.renderPage(w, r, http.StatusConflict, "notice", noticeView{Error: true, Text: msg})
		return
	}
	o.renderPage(w, r, http.StatusOK, "notice", noticeView{Text: msg})
}

// serveEvents streams server-sent events: a snapshot, then live changes. A
// client that cannot keep up is dropped by the hub; its browser reconnects
// and gets a fresh snapshot.
func (o *observer) serveEvents(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "Streaming unsupported.", http.StatusInternalServerError)
		return
	}
	sub := o.hub.subscribe()
	defer o.hub.unsubscribe(sub)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	// A retry hint keeps reconnection quick after a drop for backpressure.
	fmt.Fprint(w, "retry: 1000\n\n")
	if err := writeEvent(w, "snapshot", o.snapshot()); err != nil {
		return
	}
	flusher.Flush()
	// A comment line every 15 s detects dead clients behind idle connections.
	keepAlive := time.NewTicker(15 * time.Second)
	defer keepAlive.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-keepAlive.C:
			if _, err := io.WriteString(w, ": keep-alive\n\n"); err != nil {
				return
			}
			flusher.Flush()
		case ev, ok := <-sub.ch:
			if !ok {
				return
			}
			if _, err := w.Write(ev); err != nil {
				return
			}
			flusher.Flush()
		}
	}
}
