package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"time"
)

// auditLog is the opt-in audit writer: one row per completed tools/call in
// observability.sqlite3, plus the pre-aggregated rollups the dashboard reads.
// Every method is safe on a nil receiver, which is what a server with
// auditing disabled holds. Tool calls only queue their events; a background
// writer records them, one bounded attempt per batch, so a slow or failing
// audit database never changes or delays a tool result.
type auditLog struct {
	path   string
	config auditConfig

	// groupName and memberName are set by readNamesFrom.
	groupName  func(groupID string) string // "" when it cannot be read
	memberName func(groupID, contextID string) string
	now        func() time.Time // the retention clock

	// queue carries events to the writer goroutine; it is bounded
	// (auditQueueSize), and past that new events are dropped.
	queue  chan auditEvent
	writer sync.WaitGroup // the writer goroutine, joined by close
	// closing guards queue against sends after close.
	closing sync.RWMutex
	closed  bool
	dropped sync.Once // the warning, without mu, when observe first drops an event

	// mu serializes use of the database handle and the retention state.
	mu          sync.Mutex
	db          *sql.DB
	file        os.FileInfo // the file prepared, nil until then or after a failure
	nextCleanup time.Time
	warn        io.Writer
	warned      sync.Once
	// lockWait is how long a write waits for the lock: writeLockWait while opening, then
	// busyRetryWindow, but one try after a failed batch, so a stuck lock costs one wait.
	lockWait time.Duration
}

// auditConfig is the validated CROSSTALK_OBSERVABILITY_RETENTION_DAYS.
type auditConfig struct {
	enabled bool
	days    int    // the retention in days; 0 means unlimited ("inf")
	setting string // the value recorded in metadata.retention_setting
}

// errAuditRetention is the original's message, printed before exiting with status 2.
//
//lint:ignore ST1005 printed byte for byte as the original prints it, full stop and all.
var errAuditRetention = errors.New("CROSSTALK_OBSERVABILITY_RETENTION_DAYS must be 'inf' or a positive integer.")

const (
	auditRetentionVar = "CROSSTALK_OBSERVABILITY_RETENTION_DAYS"
	// auditMaxRetentionDays is past the start of any clock's calendar.
	auditMaxRetentionDays = 1_000_000
	// auditQueueSize bounds the events waiting for the writer: a few hundred
	// bytes each, about 7 KB with every field at its cap (28 MB in all).
	auditQueueSize = 4096
	// auditMaxBatch bounds the events written in one transaction, and so how
	// long the write lock is held.
	auditMaxBatch = 256
	// auditLinger is how long, during a run of calls, the writer waits to
	// gather a batch: each commit holds a lock the original waits 100 ms for.
	auditLinger = 100 * time.Millisecond
)

// auditDaysPattern is the original's accepted form of a number of days.
var auditDaysPattern = regexp.MustCompile(`^[1-9][0-9]*$`)

// auditConfigFromEnv validates the retention variable without touching any
// storage, so that main can refuse to start before a file is created.
func auditConfigFromEnv(lookup func(string) (string, bool)) (auditConfig, error) {
	value, ok := lookup(auditRetentionVar)
	switch {
	case !ok:
		return auditConfig{}, nil
	case value == "inf":
		return auditConfig{enabled: true, setting: "inf"}, nil
	case auditDaysPattern.MatchString(value):
		// Past auditMaxRetentionDays no row can ever expire: keep them all.
		days, err := strconv.Atoi(value)
		if err != nil || days > auditMaxRetentionDays {
			days = 0
		}
		return auditConfig{enabled: true, days: days, setting: value}, nil
	}
	return auditConfig{}, errAuditRetention
}

// openAuditLog returns the audit writer for dir, or nil when auditing is
// disabled. If preparing the schema fails now (another process holds the
// write lock, say) the server still starts and each write retries it.
func openAuditLog(dir string, config auditConfig, warn io.Writer, now func() time.Time) *auditLog {
	if !config.enabled {
		return nil
	}
	path := filepath.Join(dir, catalogFileName)
	a := &auditLog{path: path, config: config, db: openAuditDB(path), warn: warn, now: now,
		queue: make(chan auditEvent, auditQueueSize), lockWait: writeLockWait}
	if err := a.prepareWaiting(); err != nil { // before the writer starts, so without a.mu
		a.report(err)
	}
	a.lockWait = busyRetryWindow // the writer's, off the call path: its first batch too
	a.writer.Go(a.writeRows)
	return a
}

// openAuditDB opens the audit database's handle: busy_timeout(100) bounds
// a statement's wait for a lock (begin polls for BEGIN's); synchronous(NORMAL) is
// durable in WAL mode against process crashes and saves an fsync per write,
// which analytics do not need. It has one connection: there is one writer
// anyway.
func openAuditDB(path string) *sql.DB {
	return openSQLite(sqliteDSN(path, "rwc")+"&_pragma=synchronous(NORMAL)", 1)
}

// close writes what is queued, stops the writer and releases the database.
func (a *auditLog) close() error {
	if a == nil {
		return nil
	}
	a.closing.Lock()
	if !a.closed {
		a.closed = true
		close(a.queue)
	}
	a.closing.Unlock()
	a.writer.Wait() // and with it every use of the handle
	return a.db.Close()
}

// writeRows is the writer goroutine. It records waiting events in batches of
// up to auditMaxBatch, one transaction per batch (begin waits a.lockWait for
// the lock), whose failure loses that batch only: a batch costs little more than one event,
// because the same rollup and index pages are written once. After a quiet
// spell the first event is written at once; while calls keep coming, it
// lingers auditLinger to gather a batch, unless a whole one is waiting (as
// at exit, which then does not wait auditLinger a batch).
func (a *auditLog) writeRows() {
	var lastWrite time.Time
	for e := range a.queue {
		if time.Since(lastWrite) < auditLinger && len(a.queue) < auditMaxBatch-1 {
			time.Sleep(auditLinger)
		}
		// The writer is the queue's only receiver, so what len counts is
		// there to take without waiting.
		batch := []auditEvent{e}
		for len(batch) < auditMaxBatch && len(a.queue) > 0 {
			batch = append(batch, <-a.queue)
		}
		a.mu.Lock()
		err := a.prepareWaiting()
		if err == nil {
			if err = a.record(context.Background(), batch...); err == nil {
				_, err = a.cleanup(context.Background())
			}
		}
		a.lockWait = busyRetryWindow
		if err != nil {
			a.file = nil // the next batch opens the file afresh: a read-only handle stays so
			a.report(err)
			a.lockWait = 0
		}
		a.mu.Unlock()
		lastWrite = time.Now()
	}
}

// report writes the first audit failure to stderr; later ones are silent so a
// broken audit database cannot flood the log.
func (a *auditLog) report(err error) {
	a.warned.Do(func() {
		fmt.Fprintf(a.warn, "crosstalk-mcp: audit write failed, tool calls are unaffected (further failures are not reported): %v\n", err)
	})
}

// prepareWaiting is prepare, tried again for up to a.lockWait while the
// database is busy: setting a new file's modes takes its lock too.
func (a *auditLog) prepareWaiting() error {
	ctx, cancel := context.WithTimeoutCause(context.Background(), a.lockWait, errors.New("audit database still locked"))
	defer cancel()
	return retryBusyContext(ctx, a.prepare)
}

// begin starts an IMMEDIATE transaction, trying every millisecond for up to
// a.lockWait with SQLite's busy handler off, as beginImmediate does: the
// handler sleeps up to 100 ms between tries, so waiters rarely saw it free.
func (a *auditLog) begin(ctx context.Context) (tx *sql.Tx, err error) {
	a.db.ExecContext(ctx, "PRAGMA busy_timeout(0)") // on the handle's one connection; if this fails, so does BEGIN
	if err = pollLock(a.lockWait, func() (err error) { tx, err = a.db.BeginTx(ctx, nil); return err }); err != nil {
		a.db.ExecContext(ctx, "PRAGMA "+busyTimeout)
		return nil, err
	}
	tx.ExecContext(ctx, "PRAGMA "+busyTimeout) // for COMMIT, which in a rollback-journal file waits for readers
	return tx, nil
}

// attach makes srv record every completed tools/call, reading names from
// srv's store.
func (a *auditLog) attach(srv *server) {
	if a != nil {
		a.readNamesFrom(srv.store)
		srv.audit = a.observe
	}
}

// readNamesFrom makes the log consult st for the group-name snapshot of
// each event and, when a call carries no caller_name, the member's joined
// name. The HTTP transport, which has no one server, calls it directly.
func (a *auditLog) readNamesFrom(st *store) {
	if a == nil {
		return
	}
	a.groupName = func(id string) string {
		meta, _ := st.groupMetadata(id) // "" if it fails
		return meta.name
	}
	a.memberName = func(id, contextID string) string {
		members, _ := st.users(id)
		if i := slices.IndexFunc(members, func(m member) bool { return m.contextID == contextID }); i >= 0 {
			return members[i].name
		}
		return ""
	}
}

// observe queues the record of one completed tools/call and returns at once:
// the tool result is already decided, and the audit database (however slow,
// locked or broken) must not hold it up. The lookups that snapshot the
// group's state happen here, before later calls can change it.
func (a *auditLog) observe(c toolCall) {
	if a == nil {
		return
	}
	e := auditBuildEvent(c, time.Since(c.started))
	if !e.name.Valid && e.groupID.String != "" && e.contextID.String != "" && a.memberName != nil {
		name := a.memberName(e.groupID.String, e.contextID.String)
		e.name = auditIdentity(name, name != "")
	}
	// A name read ahead of the record (delete_group's, before the group was
	// destroyed, or a pipelined run's) is kept rather than read again.
	if !c.groupNameRead && e.groupID.String != "" && a.groupName != nil {
		e.groupName = truncateUTF8(a.groupName(e.groupID.String), auditValueMaxBytes)
	}
	a.closing.RLock()
	defer a.closing.RUnlock()
	if a.closed {
		return
	}
	select {
	case a.queue <- e:
	default:
		a.dropped.Do(func() {
			fmt.Fprintln(a.warn, "crosstalk-mcp: audit writer is behind; dropping audit events (reported once)")
		})
	}
}
