"""Tessera simulation and host software, one subpackage per role: golden models (:mod:`sim.model`,
pure numpy), testbenches of both test tiers (:mod:`sim.tb`), host software (:mod:`sim.host`),
benchmarks (:mod:`sim.bench`); the demonstration is :mod:`sim.demo`."""
