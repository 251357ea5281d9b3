package audit

import (
	"time"

	"github.com/aptl/aptl-kali-capture/internal/auditnetlink"
)

// The kernel's audit netlink as the engine uses it: through
// internal/auditnetlink on a plain host, or through the witness relay
// (witness/auditrelay) where the sidecar cannot reach it itself (the
// Compose pair). Both carry rules as the kernel's bytes; this file turns
// them into the engine's ruleData and back.

type status = auditnetlink.Status

const (
	statusEnabled = auditnetlink.StatusEnabled
	statusBacklog = auditnetlink.StatusBacklog
)

// errOverrun is a read that found records dropped on the way.
var errOverrun = auditnetlink.ErrOverrun

// rawKernel is the audit netlink's requests with rules as bytes:
// *auditnetlink.Control, or the relay's *auditrelay.Control.
type rawKernel interface {
	Status() (auditnetlink.Status, error)
	Set(mask, enabled, backlogLimit uint32) error
	AddRule(rule []byte) error
	DelRule(rule []byte) error
	ListRules() ([][]byte, error)
	Close() error
}

// recordSource is where the kernel's records arrive: the multicast
// group's socket, or the relay's records connection.
type recordSource interface {
	Read(buf []byte, timeout time.Duration) ([]byte, error)
	Close() error
}

// control is the engine's kernel over a rawKernel.
type control struct{ raw rawKernel }

func openControl() (*control, error) {
	c, err := auditnetlink.OpenControl()
	if err != nil {
		return nil, err
	}
	return &control{raw: c}, nil
}

func (c *control) status() (status, error)                 { return c.raw.Status() }
func (c *control) set(mask, enabled, backlog uint32) error { return c.raw.Set(mask, enabled, backlog) }
func (c *control) addRule(d ruleData) error                { return c.raw.AddRule(d.marshal()) }
func (c *control) delRule(d ruleData) error                { return c.raw.DelRule(d.marshal()) }
func (c *control) Close() error                            { return c.raw.Close() }

// listRules returns the kernel's rules.
func (c *control) listRules() ([]ruleData, error) {
	listed, err := c.raw.ListRules()
	if err != nil {
		return nil, err
	}
	rules := make([]ruleData, 0, len(listed))
	for _, b := range listed {
		d, err := unmarshalRuleData(b)
		if err != nil {
			return nil, err
		}
		rules = append(rules, d)
	}
	return rules, nil
}
