package nbdb

import (
	"testing"

	"github.com/octopus-mcs/octopus/internal/datapath/ovn/modelcheck"
)

// TestModelsAreFresh fails when the committed models differ from what modelgen makes of the
// installed NB schema: after an OVN upgrade, or a hand edit.
func TestModelsAreFresh(t *testing.T) { modelcheck.Fresh(t, "../../../..", "nb") }

// TestModelMatchesSchema checks every generated model against the schema embedded with them.
func TestModelMatchesSchema(t *testing.T) { modelcheck.MatchesSchema(t, Schema(), FullDatabaseModel) }
