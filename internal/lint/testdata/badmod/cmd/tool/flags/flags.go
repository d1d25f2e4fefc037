package flags
