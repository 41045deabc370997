package servicediscovery

// SetupImportCache exposes setupImport to the external tests, which check what its hub cache
// holds.
var SetupImportCache = setupImport
