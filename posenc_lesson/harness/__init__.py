"""What runs inside a grading kernel and behind ``check()``: the harvest, the watch, the stubs.

A room of its own, between the course's exercises (``posenc_lesson.tasks``) and posenc-grade
(``posenc_lesson.grader``), which both import it; it imports neither, nor the lab, and holds no
lesson content (no task, no reference, no judge, no right answer):

    in_kernel    the run kinds, the harvest and its gate, outputs as plain data, the learner's
                 text quoted apart from the grader's (``learner_text``)
    watch        the profile, torch function mode and audit hook that record forbidden calls;
                 what is the library's own code, told by code objects taken before any learner
                 code ran (``watch.install``)
    disarm       the stubs that replace the code of the functions an exercise forbids, and the
                 refusal of torch's ready-made attention below torch's function modes
    alone        no thread or process of the learner's may be alive at a harvest
    task_fork    each task's answer runs in a fork of the kernel without the originals it forbids
"""
