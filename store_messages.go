package main

import (
	"database/sql"
	"errors"
	"time"
)

// wakeupReminderInterval is the original's: an unacknowledged wake event is
// notified again after it.
const wakeupReminderInterval = 300 * time.Second

// messageRevision reads the constant-size marker that subscription polling
// compares, so polling never scans messages.
func (s *store) messageRevision(id string) (int64, error) {
	var rev int64
	err := s.withGroup(id, func(db *sql.DB) error {
		err := db.QueryRow("SELECT message_revision FROM group_state WHERE id = 1").Scan(&rev)
		if errors.Is(err, sql.ErrNoRows) {
			return validationErrorf("Group state marker is missing.") // the original's ValueError
		}
		return err
	})
	return rev, err
}

// dueWakeup returns the oldest unacknowledged wake event of contextID never
// notified, or else the oldest last notified over 300 s ago, without marking
// it: reminders, one per renotify gap, must not hold back new mail.
func (s *store) dueWakeup(id, contextID string) (*delivery, error) {
	cutoff := formatTimestamp(s.now().Add(-wakeupReminderInterval))
	var w *delivery
	err := s.withGroup(id, func(db *sql.DB) error {
		var row delivery
		found, err := rowFound(db.QueryRow("SELECT id, priority, relevance FROM wakeup_events WHERE context_id = ? AND acknowledged_at IS NULL "+
			"AND (last_notified_at IS NULL OR last_notified_at <= ?) ORDER BY last_notified_at IS NOT NULL, id LIMIT 1", contextID, cutoff).
			Scan(&row.id, &row.priority, &row.relevance))
		if found {
			w = &row
		}
		return err
	})
	return w, err
}

// nextWakeupReminder returns when the earliest reminder of contextID's
// notified, unacknowledged wake events falls due, or the zero time for none,
// so that the poller can skip an unchanged group until then.
func (s *store) nextWakeupReminder(id, contextID string) (time.Time, error) {
	var last sql.NullString
	err := s.withGroup(id, func(db *sql.DB) error {
		return db.QueryRow("SELECT MIN(last_notified_at) FROM wakeup_events WHERE context_id = ? AND acknowledged_at IS NULL "+
			"AND last_notified_at IS NOT NULL", contextID).Scan(&last)
	})
	if err != nil || !last.Valid {
		return time.Time{}, err
	}
	t, err := time.Parse(time.RFC3339Nano, last.String)
	if err != nil {
		// Unreadable: a reminder may be due at any time, so look every poll.
		return s.now(), nil
	}
	return t.Add(wakeupReminderInterval), nil
}

// markWakeupNotified records that a wake event's notification was written.
func (s *store) markWakeupNotified(id string, eventID int64) error {
	return s.writeGroup(id, func(tx groupTx) error {
		res, err := tx.Exec("UPDATE wakeup_events SET last_notified_at = ? WHERE id = ? AND acknowledged_at IS NULL", s.timestamp(), eventID)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n > 0 {
			return bumpRevisions(tx, "wakeup_revision")
		}
		return nil
	})
}

// sent is the result of send_message.
type sent struct {
	messageID     int64
	groupID       string
	priority      string
	mentions      []string
	routingReason string
	wakeupTargets []string
}

// outgoing is one message to send; token is the name of the per-agent token
// it came through ("" for none), which message_tokens records.
type outgoing struct {
	contextID, name, text, priority, token string
	wake                                   []string
}
