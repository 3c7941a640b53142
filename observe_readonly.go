package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// readOnlyPool keeps one read-only handle per database file the dashboard
// reads, because opening a SQLite connection costs milliseconds; a handle is
// reused only while the path still names the same file. At most
// maxReadOnlyHandles stay open, since each holds a few hundred kilobytes;
// unchanged groups are skipped by signature, so few need reopening.
type readOnlyPool struct {
	// mu guards entries and retired, which request handlers and the poller share.
	mu      sync.Mutex
	entries map[string]*readOnlyEntry
	retired []*readOnlyEntry // evicted, oldest first, closed by a later eviction or closeAll
}

// readOnlyEntry is one cached handle and the identity of the file it opened;
// lastUsed is when a retired one was evicted.
type readOnlyEntry struct {
	db       *sql.DB
	info     os.FileInfo
	lastUsed time.Time
}

// maxReadOnlyHandles bounds the open handles of a readOnlyPool.
const maxReadOnlyHandles = 32

// readOnlyCacheSize bounds each connection's page cache to 512 KiB (SQLite's
// default is 2,000 KiB): the reads are single passes the OS cache serves
// anyway; at 200 groups peak RSS fell from 66 to 62 MB at the same speed.
const readOnlyCacheSize = "_pragma=cache_size%28-512%29"

// retiredHandleGrace is how long an evicted handle stays usable, for a
// request that fetched it just before; its idle connections close at once,
// the handle at the first eviction after the grace, so no timer is needed.
const retiredHandleGrace = time.Minute

// errNoDatabase reports that an allowed database file does not exist.
var errNoDatabase = errors.New("database does not exist")

// checkedFile returns the file information of an allowed database below dir:
// a regular group or observability file, not a symlink leading outside dir.
func checkedFile(dir, path string) (os.FileInfo, error) {
	name := filepath.Base(path)
	if _, isGroup := groupIDOfFile(name); name != catalogFileName && !isGroup {
		return nil, fmt.Errorf("database name %q is not allowed", name)
	}
	info, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, errNoDatabase
		}
		return nil, fmt.Errorf("stat %s: %w", name, err)
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", name)
	}
	if l, err := os.Lstat(path); err == nil && l.Mode()&os.ModeSymlink != 0 {
		realDir, err1 := filepath.EvalSymlinks(dir)
		realFile, err2 := filepath.EvalSymlinks(path)
		if err1 != nil || err2 != nil || filepath.Dir(realFile) != realDir {
			return nil, fmt.Errorf("%s points outside the groups directory", name)
		}
	}
	return info, nil
}

// get returns a read-only handle for path, reopened if the file was replaced.
func (p *readOnlyPool) get(dir, path string) (*sql.DB, error) {
	info, err := checkedFile(dir, path)
	if err != nil {
		if errors.Is(err, errNoDatabase) {
			p.forget(path)
		}
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.entries[path]; ok && os.SameFile(e.info, info) {
		e.lastUsed = time.Now()
		return e.db, nil
	}
	p.retireLocked(path) // the path names another file now, if it was cached
	p.evictLocked()
	// A handle evicted from this same file is taken back, as each holds a
	// goroutine through the grace. A new one has a few connections for
	// concurrent requests; idle ones close soon, so no file stays open
	// between looks.
	e := &readOnlyEntry{info: info}
	if i := slices.IndexFunc(p.retired, func(r *readOnlyEntry) bool { return r.info.Name() == info.Name() && os.SameFile(r.info, info) }); i >= 0 {
		e = p.retired[i]
		p.retired = slices.Delete(p.retired, i, i+1)
	} else {
		e.db = openSQLite(readOnlyDSN(path)+"&"+readOnlyCacheSize, 4)
		e.db.SetConnMaxIdleTime(10 * time.Second)
	}
	e.db.SetMaxIdleConns(1)
	e.lastUsed, p.entries[path] = time.Now(), e
	return e.db, nil
}

// evictLocked retires least recently used handles to make room for one more.
func (p *readOnlyPool) evictLocked() {
	for len(p.retired) > 0 && time.Since(p.retired[0].lastUsed) > retiredHandleGrace {
		p.retired[0].db.Close()
		p.retired = p.retired[1:]
	}
	for len(p.entries) >= maxReadOnlyHandles {
		oldest := slices.MinFunc(slices.Collect(maps.Keys(p.entries)), func(a, b string) int {
			return p.entries[a].lastUsed.Compare(p.entries[b].lastUsed)
		})
		p.retireLocked(oldest)
	}
}

// retireLocked moves the handle for path, if any, to the retired list, not
// closed at once, since a request may have just been handed it.
func (p *readOnlyPool) retireLocked(path string) {
	if e, ok := p.entries[path]; ok {
		delete(p.entries, path)
		e.db.SetMaxIdleConns(0)
		e.lastUsed = time.Now()
		p.retired = append(p.retired, e)
	}
}

// forget retires the handle for path, if any.
func (p *readOnlyPool) forget(path string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.retireLocked(path)
}

// closeAll closes every cached and retired handle.
func (p *readOnlyPool) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range append(p.retired, slices.Collect(maps.Values(p.entries))...) {
		e.db.Close()
	}
	p.entries, p.retired = map[string]*readOnlyEntry{}, nil
}

// group returns a handle for a group database.
func (p *readOnlyPool) group(dir, id string) (*sql.DB, error) {
	if validateGroupID(id) != nil {
		return nil, fmt.Errorf("invalid group id %q", id)
	}
	return p.get(dir, groupFile(dir, id))
}

// audit returns a handle for observability.sqlite3.
func (p *readOnlyPool) audit(dir string) (*sql.DB, error) {
	return p.get(dir, filepath.Join(dir, catalogFileName))
}

// snapshotState is a group's revisions and its newest message id (nil, JSON
// null, for an empty group).
type snapshotState struct {
	marker revisions
	latest *int64
}

// groupState reads a group's counters and newest message id at once.
func (p *readOnlyPool) groupState(dir, id string) (snapshotState, error) {
	var s snapshotState
	db, err := p.group(dir, id)
	if err != nil {
		return s, err
	}
	err = db.QueryRow("SELECT message_revision, member_revision, wakeup_revision, metadata_revision, (SELECT MAX(id) FROM messages) FROM group_state WHERE id = 1").
		Scan(&s.marker.message, &s.marker.member, &s.marker.wakeup, &s.marker.metadata, &s.latest) // NULL leaves it nil
	if err != nil {
		return s, fmt.Errorf("read state of %s: %w", id, err)
	}
	return s, nil
}

// latestAuditID returns the newest audit row id; ok is false when there is
// no audit table (auditing disabled) or no row yet.
func (p *readOnlyPool) latestAuditID(dir string) (int64, bool, error) {
	db, err := p.audit(dir)
	if errors.Is(err, errNoDatabase) {
		return 0, false, nil
	}
	var tables map[string]bool
	if err == nil {
		tables, err = tableNames(context.Background(), db)
	}
	if err != nil || !tables["tool_calls"] {
		return 0, false, err
	}
	var latest sql.NullInt64
	if err := db.QueryRow("SELECT MAX(id) FROM tool_calls").Scan(&latest); err != nil {
		return 0, false, fmt.Errorf("read latest audit id: %w", err)
	}
	return latest.Int64, latest.Valid, nil
}

// discoverGroups lists the group ids whose database files exist in dir,
// sorted, and reports whether dir exists at all.
func discoverGroups(dir string) ([]string, bool) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, false
	}
	var ids []string
	for _, e := range entries { // sorted by name, and so by id
		if id, ok := groupIDOfFile(e.Name()); ok && e.Type().IsRegular() {
			ids = append(ids, id)
		}
	}
	return ids, true
}

// catalogNames reads every group name from the catalog in one query, if any.
func catalogNames(ctx context.Context, dir string, pool *readOnlyPool) map[string]string {
	names := map[string]string{}
	db, err := pool.audit(dir)
	if err != nil {
		return names
	}
	eachRow(ctx, db, func(row rowScanner) error {
		var id string
		var name sql.NullString
		if row.Scan(&id, &name) == nil && validateGroupID(id) == nil {
			names[id] = name.String
		}
		return nil
	}, "SELECT group_id, "+shownName("name")+" FROM groups")
	return names
}

// eachRow runs query and calls scan on every row.
func eachRow(ctx context.Context, q queryer, scan func(rowScanner) error, query string, args ...any) error {
	_, err := queryAll(ctx, q, func(row rowScanner) (struct{}, error) { return struct{}{}, scan(row) }, query, args...)
	return err
}

// groupReadCache keeps what views last read from each group (summary,
// activity pages, snapshot state) with its file signature, and serves it
// again while the signature proves nothing was committed since: an idle
// group costs two stats, and at 100 groups Overview renders 5x faster.
type groupReadCache struct {
	// mu guards groups and every reads map: Overview renders and starting
	// event streams read and fill entries at once.
	mu     sync.Mutex
	groups map[string]*groupReads
}

// groupReads is what was read from one group under one signature, by key:
// "summary", "snapshot" or an activityPageKey.
type groupReads struct {
	sig   groupSignature
	reads map[any]any
}

// activityPageKey names one page of a group's activity.
type activityPageKey struct {
	wakeup bool
	before int64
}

// forget drops everything cached for group id.
func (c *groupReadCache) forget(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.groups, id)
}

// cachedRead returns what read returns for group id under key, from o's
// cache while the group's files are unchanged; nothing is stored when the
// signature or read fails. Each key has one reader, so the value is a T.
func cachedRead[T any](o *observer, id string, key any, read func() (T, error)) (T, error) {
	c := o.reads
	sig, ok := readGroupSignature(groupFile(o.dir, id), time.Now())
	c.mu.Lock()
	if r := c.groups[id]; r != nil && ok && sig.unchangedSince(r.sig) {
		if v, hit := r.reads[key]; hit {
			c.mu.Unlock()
			return v.(T), nil
		}
	} else {
		delete(c.groups, id)
	}
	c.mu.Unlock()
	v, err := read()
	if err == nil && ok {
		c.mu.Lock()
		r := c.groups[id]
		if r == nil || !r.sig.identical(sig) {
			r = &groupReads{sig: sig, reads: map[any]any{}}
			c.groups[id] = r
		}
		r.reads[key] = v
		c.mu.Unlock()
	}
	return v, err
}
