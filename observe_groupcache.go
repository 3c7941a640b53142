package main

import (
	"context"
	"sync"
	"time"
)

// groupReadCache keeps what views last read from each group (its Overview
// summary, its activity pages, its snapshot state) together with the
// group's file signature at the time, and serves them again while the
// signature proves that nothing was committed since. With hundreds of
// groups most are idle at any moment, so a render then costs two stat calls
// per idle group instead of opening its database: at 100 groups Overview
// renders in a fifth of the time, and readOnlyPool can keep only a few
// handles open.
type groupReadCache struct {
	// mu guards groups and every reads map: Overview renders and starting
	// event streams read and fill entries at once.
	mu     sync.Mutex
	groups map[string]*groupReads
}

// groupReads is what was read from one group under one signature, by
// readKey: summaryRead, snapshotRead or an activityPageKey.
type groupReads struct {
	sig   groupSignature
	reads map[any]any
}

// summaryRead and snapshotRead are the readKeys of a group's Overview
// summary and of its part of an event stream's snapshot.
type (
	summaryRead  struct{}
	snapshotRead struct{}
)

// activityPageKey names one page of a group's activity.
type activityPageKey struct {
	wakeup bool
	before int64
}

func newGroupReadCache() *groupReadCache {
	return &groupReadCache{groups: map[string]*groupReads{}}
}

// forget drops everything cached for group id.
func (c *groupReadCache) forget(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.groups, id)
}

// cachedRead returns what read returns for group id under key, from the
// cache while the group's files are unchanged since it was stored. Nothing
// is stored when the signature cannot be read or read fails.
func cachedRead[T any](c *groupReadCache, dir, id string, key any, read func() (T, error)) (T, error) {
	sig, ok := readGroupSignature(groupFile(dir, id), time.Now())
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

// cachedGroupSummary is readGroupSummary through the cache.
func (o *observer) cachedGroupSummary(ctx context.Context, id string) (groupSummary, error) {
	return cachedRead(o.reads, o.dir, id, summaryRead{}, func() (groupSummary, error) { return o.readGroupSummary(ctx, id) })
}

// cachedActivityRows is activityRows through the cache.
func (o *observer) cachedActivityRows(ctx context.Context, g groupSummary, wakeup bool, before int64) ([]activityEvent, error) {
	return cachedRead(o.reads, o.dir, g.ID, activityPageKey{wakeup, before}, func() ([]activityEvent, error) {
		return o.activityRows(ctx, g, wakeup, before)
	})
}

// cachedSnapshotState is groupState through the cache, for the snapshot
// every event stream starts with.
func (o *observer) cachedSnapshotState(id string) (snapshotState, error) {
	return cachedRead(o.reads, o.dir, id, snapshotRead{}, func() (snapshotState, error) { return o.dbs.groupState(o.dir, id) })
}
