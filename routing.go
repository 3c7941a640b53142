package main

import (
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// recipient is a group member other than a message's sender.
type recipient struct{ contextID, name string }

// target is one routed wakeup recipient with the reason it was chosen.
type target struct{ contextID, relevance string }

// routing is the outcome of routing one message.
type routing struct {
	mentions []string
	targets  []target
	reason   string
}

// route picks a message's wakeup targets the way the original does: valid
// explicit wake_context_ids first, then urgent (everyone), then @mentions or
// @all, then everyone as a fallback. Mentions are reported whatever route
// wins. others is in the group_members table's natural order.
func route(others []recipient, text, priority string, wakeIDs []string) routing {
	var r routing
	var mentioned []recipient
	// Lowercasing never makes an '@', so text without one (a huge paste,
	// typically) is not copied just to find no mention in it.
	if strings.Contains(text, "@") {
		lower := pyLower(text)
		if hasMention(lower, "all") {
			mentioned = others
		} else {
			for _, m := range others {
				if hasMention(lower, m.contextID) || hasMention(lower, m.name) {
					mentioned = append(mentioned, m)
				}
			}
		}
	}
	r.mentions = mapSlice(mentioned, func(m recipient) string { return m.contextID })
	var explicit []recipient
	for _, m := range others {
		if slices.Contains(wakeIDs, m.contextID) {
			explicit = append(explicit, m)
		}
	}
	var picked []recipient
	switch {
	case len(explicit) > 0:
		picked, r.reason = explicit, "explicit"
	case priority == "urgent":
		picked, r.reason = others, "urgent"
	case len(mentioned) > 0:
		picked, r.reason = mentioned, "mentioned"
	default:
		picked, r.reason = others, "fallback"
	}
	for _, m := range picked {
		r.targets = append(r.targets, target{m.contextID, r.reason})
	}
	return r
}

// hasMention reports whether lower (a lowercased message) holds the complete
// token "@identifier": followed by the end of the text, whitespace or one of
// .,!?;: so that "@bob" does not match "@bobby".
func hasMention(lower, identifier string) bool {
	needle := "@" + pyLower(identifier)
	for rest := lower; ; {
		i := strings.Index(rest, needle)
		if i < 0 {
			return false
		}
		if end := i + len(needle); end == len(rest) || strings.IndexByte(" \t\r\n.,!?;:", rest[end]) >= 0 {
			return true
		}
		rest = rest[i+1:]
	}
}

// The resources: each group has a change-signal resource,
// crosstalk://groups/<group_id>/messages, and each member a wakeup resource,
// crosstalk://groups/<group_id>/wakeups/<percent-encoded context_id>, which
// only a session that joined as that member may read or subscribe to.
const (
	uriPrefix     = "crosstalk://groups/"
	uriSuffix     = "/messages"
	wakeupSegment = "/wakeups/"
)

// groupURI is a group's change-signal resource.
func groupURI(groupID string) string { return uriPrefix + groupID + uriSuffix }

// wakeupURI is one member's wakeup resource; the context id is
// percent-encoded like Python's quote(context_id, safe=""): every byte but
// letters, digits and _.-~ becomes %XX, as QueryEscape makes it, but for the
// space, which QueryEscape writes as +.
func wakeupURI(groupID, contextID string) string {
	return uriPrefix + groupID + wakeupSegment + strings.ReplaceAll(url.QueryEscape(contextID), "+", "%20")
}

// parseGroupURI returns the group id of a group resource URI.
func parseGroupURI(uri string) (string, error) {
	if !strings.HasPrefix(uri, uriPrefix) || !strings.HasSuffix(uri, uriSuffix) {
		return "", validationErrorf("Invalid Crosstalk subscription URI.")
	}
	id := uri[len(uriPrefix):max(len(uriPrefix), len(uri)-len(uriSuffix))] // "" where the two share the slash, as Python slices
	return id, validateGroupID(id)
}

// parseWakeupURI returns the group and context ids of a wakeup resource URI.
func parseWakeupURI(uri string) (groupID, contextID string, err error) {
	if !strings.HasPrefix(uri, uriPrefix) || !strings.Contains(uri, wakeupSegment) {
		return "", "", validationErrorf("Invalid Crosstalk wakeup subscription URI.")
	}
	groupID, encoded, _ := strings.Cut(uri[len(uriPrefix):], wakeupSegment)
	if err := validateGroupID(groupID); err != nil {
		return "", "", err
	}
	contextID = percentDecode(encoded)
	if isBlank(contextID) {
		return "", "", validationErrorf("Invalid wakeup context ID.")
	}
	return groupID, contextID, nil
}

// isWakeupURI reports whether uri names a wakeup resource rather than a group.
func isWakeupURI(uri string) bool { return strings.Contains(uri, wakeupSegment) }

// pyLower lowercases s as Python's str.lower() does: simple mappings plus
// İ → i̇ and a word-final Σ → ς. Mentions are matched on this form.
func pyLower(s string) string {
	// Without either, Go's own lowercasing is Python's.
	if !strings.ContainsRune(s, 'İ') && !strings.ContainsRune(s, 'Σ') {
		return strings.ToLower(s)
	}
	// Walked in place: a []rune would add four bytes a character to a text
	// that may be 200 MB.
	var b strings.Builder
	b.Grow(len(s))
	for i, r := range s {
		switch {
		case r == 'İ':
			b.WriteString("i\u0307")
		case r == 'Σ' && finalSigma(s, i):
			b.WriteRune('ς')
		default:
			b.WriteRune(unicode.ToLower(r))
		}
	}
	return b.String()
}

// finalSigma implements Unicode's Final_Sigma condition for the Σ at s[i]: a
// cased letter comes before it and none after it, skipping case-ignorable
// characters both ways.
func finalSigma(s string, i int) bool {
	before, _ := utf8.DecodeLastRuneInString(strings.TrimRightFunc(s[:i], caseIgnorable))
	if !cased(before) {
		return false
	}
	after, _ := utf8.DecodeRuneInString(strings.TrimLeftFunc(s[i+len("Σ"):], caseIgnorable))
	return !cased(after) // an empty end decodes as U+FFFD, which is not cased
}

// cased is Unicode's Cased property, which Final_Sigma tests.
func cased(r rune) bool {
	return unicode.IsUpper(r) || unicode.IsLower(r) || unicode.IsTitle(r) ||
		unicode.Is(unicode.Other_Lowercase, r) || unicode.Is(unicode.Other_Uppercase, r)
}

// caseIgnorable is Unicode's Case_Ignorable property, which Final_Sigma skips.
func caseIgnorable(r rune) bool {
	switch r {
	case '\'', '.', ':', '^', '`', '\u00b7', '\u0387', '\u055f', '\u05f4', '\u2018', '\u2019', '\u2024', '\u2027', '\ufe13', '\ufe52', '\ufe55', '\uff07', '\uff0e', '\uff1a':
		return true
	}
	return unicode.In(r, unicode.Mn, unicode.Me, unicode.Cf, unicode.Lm, unicode.Sk)
}

// percentDecode undoes percent-encoding leniently, like Python's unquote:
// malformed escapes are kept as they are.
func percentDecode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(v))
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return strings.ToValidUTF8(b.String(), "\uFFFD")
}
