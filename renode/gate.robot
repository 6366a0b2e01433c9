*** Settings ***
Documentation     Host-injected captures come back with the HIR gate's verdict and
...               scores, as hirmem.protocol.gate computes them for the same record.
Resource          keywords/${BACKEND}.resource
Suite Setup       Start Backend
Suite Teardown    Stop Backend
Test Setup        Boot And Handshake
Test Teardown     Shut Down Board


*** Variables ***
${BACKEND}        renode
${BOARD}          mps2-an385


*** Test Cases ***
A Clean Reading Is Green
    Send Capture    temp/0    {"t":21.5}    0x0FFF    0x10000    0xE666
    Expect Verdict    GREEN

Soft Failures Make It Yellow
    Send Capture    temp/1    {"t":21.6}    0x0CCC    0x10000    0x10000
    Expect Verdict    YELLOW

A Consent Failure Is Quarantined Red
    Send Capture    door    open    0x0BFF    0x10000    0x10000
    Expect Verdict    RED

Verdicts Come Back In Order And Are Counted
    Send Capture    temp/0    {"t":21.5}    0x0FFF    0x10000    0xE666
    Send Capture    x    nothing    0x0000    0x1234    0x4321
    Send Capture    temp/2    {"t":22}    0x0CDD    0x10000    0x10000
    Expect Verdict    GREEN
    Expect Verdict    RED
    Expect Verdict    YELLOW
    Expect Status    captures=3    ring_used=3    frames_bad=0


*** Keywords ***
Boot And Handshake
    Boot Board    ${BOARD}
    Handshake
