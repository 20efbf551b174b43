"""posenc-grade: grade a whole class's exercise notebooks, each in a shut-in kernel.

    posenc-grade submissions/ --out grades/        (or python -m posenc_lesson.grader)

The tasks it grades with are the room above, ``posenc_lesson.tasks``; this room is the machine
that runs them on untrusted notebooks. One module per stage:

    submissions  find the submitted notebooks and match each to its exercise
    plan         the trusted cells of solutions/, with the learner's solution cells swapped in
    kernel       a fresh Jupyter kernel with time limits, killed with its process group
    zygote       the process that imported torch once and forks each kernel
    sandbox      each kernel shut in: namespaces, a tmpfs, its own uid, rlimits (the spec, the probe)
    shut_in      what runs in the sandboxed processes (standard library only)
    contain      where no namespace can be made (a container as root): the container is the sandbox
    flags        the static scan of answer cells: review flags for the instructor
    grader       run a plan in a kernel, take each task's outputs out, score them here
    report       grades.csv, one JSON per submission, the summary table
    class_report report.html: per task, worst first, the scores and the mistakes ranked
    totals       every submission counts: points possible on rows that ran nothing, --expect
    feedback     one offline page per student to hand back (--feedback)
    privacy      grades, submissions and the key stay out of commits and images
    cli          the command line: posenc-grade, or python -m posenc_lesson.grader
    errors       UsageError (exit status 2), InfrastructureError (1), one-line messages
"""

import sys

# nbformat imports jsonschema, whose optional "iri" format checker imports rfc3987_syntax, and that
# builds a Lark grammar at import: about 2.8 s of CPU in every posenc-grade run (issue 35).
# nbformat validates notebooks without format checkers, so the grader runs as if that optional
# package were absent (jsonschema then skips the "iri" checks it is the only user of).
sys.modules.setdefault("rfc3987_syntax", None)

