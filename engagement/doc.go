// Package engagement is what SmartFeed learns from: the record of what each user was shown and
// did with it, and the model that scores pins from it.
//
//   - Store keeps, in zen's "engagement" table, per user: a profile of affinities to authors,
//     boards, interests and sources, updated from engagement with time decay, with the authors
//     the user hid; the pins the user hid; the impression log (one row per shown pin, with the
//     features it was scored with, its experiment arm and the labels of what followed); and the
//     marks that make a reported batch apply once.
//   - Model is a logistic model over a fixed, named feature vector (FeatureNames, Vector), read
//     from a versioned JSON file and refused when its features or weights are wrong; Live holds
//     the one in use and swaps in a new file while serving.
//   - Fit, AUC and LogLoss train and evaluate a model on the impression log (Train), in pure Go.
//   - Experiment assigns users to arms by a stable hash, so every process agrees on a user's arm.
//
// The package is a library of the services (the worker scores with it and records engagement,
// the generator and the feed service read the hide set, the engagement service writes hides):
// it imports zen only.
package engagement
