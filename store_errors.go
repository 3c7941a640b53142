package main

import (
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"strings"

	"modernc.org/sqlite"
)

// toolError is a failure reported to the agent as an isError tool result
// whose text is {"error": msg}. Agents read msg, so the wording follows the
// original's.
type toolError struct {
	category string
	msg      string
}

// Error categories, shared with the audit log and the original's README.
const (
	categoryValidation    = "validation"
	categoryNotFound      = "not_found"
	categoryAuthorization = "authorization"
	categoryBusy          = "sqlite_busy"
	categoryInternal      = "internal"
)

func (e *toolError) Error() string { return e.msg }

func validationErrorf(format string, args ...any) error {
	return &toolError{category: categoryValidation, msg: fmt.Sprintf(format, args...)}
}

func authorizationErrorf(format string, args ...any) error {
	return &toolError{category: categoryAuthorization, msg: fmt.Sprintf(format, args...)}
}

// The original's answers once the retry window is spent, and to a caller
// that has not joined a group or names itself otherwise than it joined.
var (
	errGroupBusy = &toolError{category: categoryBusy,
		msg: "Cannot complete operation because the group is busy. Please try again in a moment."}
	errNotJoined    = authorizationErrorf("Context has not joined this group. Call join_group first.")
	errNameMismatch = authorizationErrorf("name does not match this context's joined group name. Call join_group to update it.")
)

func groupNotFound(id string) error {
	return &toolError{category: categoryNotFound,
		msg: "Group does not exist: " + id + ". Create it first or check the group_id."}
}

// errWakeupNotAuthorized answers wakeup access by a session that has not
// joined as that context: a URI alone must not grant access.
var errWakeupNotAuthorized = authorizationErrorf("Wakeup resource is not authorized for this MCP session. Call join_group first.")

// classify maps a store error to the agent-facing error of the original.
func classify(toolName string, err error) *toolError {
	var te *toolError
	var se *sqlite.Error
	var pe *fs.PathError
	switch {
	case errors.As(err, &te):
		return te
	case isBusy(err):
		return errGroupBusy
	case errors.As(err, &se):
		return &toolError{category: categoryInternal, msg: "Database error while processing " + toolName + ": " + sqliteMessage(se)}
	case errors.As(err, &pe):
		return &toolError{category: categoryInternal, msg: "Storage error while processing " + toolName + ": " + pe.Error()}
	}
	return &toolError{category: categoryInternal, msg: "Storage error while processing " + toolName + ": " + err.Error()}
}

var sqliteCodeSuffix = regexp.MustCompile(` \(\d+\)( \(SQLITE_[A-Z_]+\))?$`)

// sqliteMessage is SQLite's own message without the driver's code suffix,
// as Python's sqlite3 module reports it ("database or disk is full").
func sqliteMessage(se *sqlite.Error) string {
	msg := sqliteCodeSuffix.ReplaceAllString(se.Error(), "")
	if _, detail, ok := strings.Cut(msg, ": "); ok {
		return detail
	}
	return msg
}
