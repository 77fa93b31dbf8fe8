"""python manage.py team_member — a team's members from the command line (as on the team's admin page).

    python manage.py team_member research alice --role admin     # add, or change the role
    python manage.py team_member research alice --remove
    python manage.py team_member research                        # list the members

The user must exist (``createsuperuser``, or Users in the admin) and be staff, since only staff sign in to
the admin; ``--make-staff`` makes them staff. Every change goes to the audit trail, as in the admin.
"""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from agents.models import Team, TeamMembership
from agents.services import Actor, team_member_remove, team_member_set

ACTOR = Actor(label="manage.py team_member")


class Command(BaseCommand):
    help = "Add a staff user to a team with a role, change their role, remove them, or list the team's members."

    def add_arguments(self, parser):
        parser.add_argument("team", help="the team's slug")
        parser.add_argument("username", nargs="?", help="the user (none: list the team's members)")
        parser.add_argument("--role", choices=TeamMembership.Role.values, default=TeamMembership.Role.VIEWER)
        parser.add_argument("--remove", action="store_true", help="remove the user from the team")
        parser.add_argument("--make-staff", action="store_true", help="make the user staff if they are not")

    def handle(self, *args, team, username, role, remove, make_staff, **options):
        found = Team.objects.filter(slug=team).first()
        if found is None:
            raise CommandError(f"No team {team!r} (create it with `manage.py create_team {team}`).")
        if username is None:
            for membership in TeamMembership.objects.filter(team=found).select_related("user"):
                self.stdout.write(f"{membership.user.get_username()}\t{membership.role}")
            return
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user {username!r} (create it with `manage.py createsuperuser` or in the admin).")
        if remove:
            if not team_member_remove(team=found, user=user, actor=ACTOR):
                raise CommandError(f"{username!r} is not a member of {team!r}.")
            self.stdout.write(f"Removed {username!r} from {team!r}.")
            return
        if not user.is_staff:
            if not make_staff:
                raise CommandError(f"{username!r} is not staff and could not sign in to the admin: add --make-staff.")
            user.is_staff = True
            user.save(update_fields=["is_staff"])
        _, outcome = team_member_set(team=found, user=user, role=role, actor=ACTOR)
        self.stdout.write(f"{username!r} in {team!r} as {role}: {outcome}.")
