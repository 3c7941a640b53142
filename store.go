package main

import (
	"net/url"
	"time"
)

// formatTimestamp renders t the way the Python original's
// datetime.isoformat() does for UTC: six fractional digits, or none when the
// microseconds are zero. Writers compare these strings in SQL, so the format
// is part of the on-disk contract.
func formatTimestamp(t time.Time) string {
	t = t.UTC().Truncate(time.Microsecond)
	if t.Nanosecond() == 0 {
		return t.Format("2006-01-02T15:04:05+00:00")
	}
	return t.Format("2006-01-02T15:04:05.000000+00:00")
}

// sqliteDSN builds a modernc.org/sqlite data source name. Per-connection
// settings must live in the DSN because database/sql pools connections.
func sqliteDSN(path string, mode string) string {
	q := url.Values{}
	if mode != "" {
		q.Set("mode", mode)
	}
	q.Add("_pragma", "busy_timeout(100)")
	q.Set("_txlock", "immediate")
	return "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
}
