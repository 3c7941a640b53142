package main

import (
	"context"
	"sync"
	"time"
)

// groupReadCache keeps what the Overview last read from each group (its
// summary and its activity pages) together with the group's file signature
// at the time, and serves them again while the signature proves that
// nothing was committed since. With hundreds of groups most are idle at any
// moment, so a render then reads two stat results per idle group instead of
// opening its database, which keeps Overview fast and lets readOnlyPool keep
// only a few handles open.
type groupReadCache struct {
	mu     sync.Mutex
	groups map[string]*groupReads
}

// groupReads is what was read from one group under one signature.
type groupReads struct {
	sig     groupSignature
	summary *groupSummary
	pages   map[activityPageKey][]activityEvent
	state   *snapshotState
}

// snapshotState is a group's part of an event stream's snapshot.
type snapshotState struct {
	marker revisions
	latest *int64
}

// activityPageKey names one page of a group's activity.
type activityPageKey struct {
	wakeup bool
	before int64
}

func newGroupReadCache() *groupReadCache {
	return &groupReadCache{groups: map[string]*groupReads{}}
}

// current returns the reads of group id that are still valid for sig,
// dropping them when they are not; nil when there are none. ok is false
// when the signature could not be read, and nothing may then be cached.
func (c *groupReadCache) current(dir, id string) (sig groupSignature, reads *groupReads, ok bool) {
	sig, ok = readGroupSignature(groupFile(dir, id), time.Now())
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.groups[id]
	if r == nil || !ok || !sig.unchangedSince(r.sig) {
		delete(c.groups, id)
		return sig, nil, ok
	}
	return sig, r, ok
}

// entryLocked returns the reads of id for sig, starting them when sig is
// new. Called with c.mu held.
func (c *groupReadCache) entryLocked(id string, sig groupSignature) *groupReads {
	r := c.groups[id]
	if r == nil || !r.sig.identical(sig) {
		r = &groupReads{sig: sig, pages: map[activityPageKey][]activityEvent{}}
		c.groups[id] = r
	}
	return r
}

// forget drops everything cached for group id.
func (c *groupReadCache) forget(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.groups, id)
}

// cachedGroupSummary is readGroupSummary through the cache.
func (o *observer) cachedGroupSummary(ctx context.Context, id string) (groupSummary, error) {
	sig, reads, ok := o.reads.current(o.dir, id)
	if reads != nil {
		// Renders run at once (Overview, event streams), and the one that
		// misses stores the summary under reads.mu: read it under the same
		// lock.
		o.reads.mu.Lock()
		summary := reads.summary
		o.reads.mu.Unlock()
		if summary != nil {
			return *summary, nil
		}
	}
	g, err := o.readGroupSummary(ctx, id)
	if err == nil && ok {
		o.reads.mu.Lock()
		o.reads.entryLocked(id, sig).summary = &g
		o.reads.mu.Unlock()
	}
	return g, err
}

// cachedActivityRows is activityRows through the cache.
func (o *observer) cachedActivityRows(ctx context.Context, g groupSummary, wakeup bool, before int64) ([]activityEvent, error) {
	key := activityPageKey{wakeup, before}
	sig, reads, ok := o.reads.current(o.dir, g.ID)
	if reads != nil {
		o.reads.mu.Lock()
		page, hit := reads.pages[key]
		o.reads.mu.Unlock()
		if hit {
			return page, nil
		}
	}
	page, err := o.activityRows(ctx, g, wakeup, before)
	if err == nil && ok {
		o.reads.mu.Lock()
		o.reads.entryLocked(g.ID, sig).pages[key] = page
		o.reads.mu.Unlock()
	}
	return page, err
}

// cachedSnapshotState reads a group's revisions and newest message id
// through the cache, for the snapshot every event stream starts with.
func (o *observer) cachedSnapshotState(id string) (revisions, *int64, error) {
	sig, reads, ok := o.reads.current(o.dir, id)
	if reads != nil {
		// Two event streams may start at once, and the one that misses
		// stores state under reads.mu: read it under the same lock.
		o.reads.mu.Lock()
		state := reads.state
		o.reads.mu.Unlock()
		if state != nil {
			return state.marker, state.latest, nil
		}
	}
	marker, err := o.dbs.groupRevisions(o.dir, id)
	if err != nil {
		return marker, nil, err
	}
	latest, err := o.dbs.latestMessageID(o.dir, id)
	if err != nil {
		return marker, nil, err
	}
	if ok {
		o.reads.mu.Lock()
		o.reads.entryLocked(id, sig).state = &snapshotState{marker, latest}
		o.reads.mu.Unlock()
	}
	return marker, latest, nil
}
